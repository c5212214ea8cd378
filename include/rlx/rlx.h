// Umbrella header: everything a user of RLX needs to build, compile and run graphs.
//
//   #include "rlx/rlx.h"
//   rlx::ir::GraphBuilder b;  ...  rlx::Session s(rlx::Device::cpu());  s.compile(*b.build());
#pragma once

#include "rlx/base/half.h"
#include "rlx/base/status.h"
#include "rlx/compile/options.h"
#include "rlx/ir/builder.h"
#include "rlx/ir/graph.h"
#include "rlx/ir/module.h"
#include "rlx/runtime/backend.h"
#include "rlx/runtime/compiled_graph.h"
#include "rlx/runtime/custom_kernels.h"
#include "rlx/runtime/device.h"
#include "rlx/runtime/session.h"
#include "rlx/runtime/tensor.h"

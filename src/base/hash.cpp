// bulk_checksum: XXH3-64 from Debian's xxHash, compiled into this file alone
// (XXH_INLINE_ALL), so nothing links against the library.
#include "rlx/base/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace rlx {

uint64_t bulk_checksum(const void* data, size_t n) { return XXH3_64bits(data, n); }

}  // namespace rlx

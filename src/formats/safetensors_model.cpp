// Opens a safetensors checkpoint of one or more shards: a single file, a
// model.safetensors.index.json (weight_map: tensor -> shard file) or a directory.
// Every tensor the index names is checked to exist in the shard it names; shards stay
// inside the model folder after resolving links; the index nests at most kMaxJsonDepth.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "rlx/base/json_limits.h"
#include "rlx/formats/safetensors.h"

namespace rlx::formats {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxIndexBytes = 64ull << 20;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

// True if `inner` is `root` or lies below it (both absolute and canonical).
bool is_within(const fs::path& inner, const fs::path& root) {
  auto r = root.begin(), i = inner.begin();
  for (; r != root.end(); ++r, ++i)
    if (i == inner.end() || *i != *r) return false;
  return true;
}

// The shard `file` of the index in `dir`, after resolving links: it must stay inside
// the model folder, or inside the blobs folder of a Hugging Face cache when `dir` is one
// of its snapshots (snapshots/<revision>/<file> links to ../../blobs/<hash>).
Expected<std::string> contained_shard(const fs::path& dir, const std::string& file, const std::string& index) {
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  const fs::path resolved = fs::weakly_canonical(fs::absolute(dir / file, ec), ec);
  if (ec) return Error::io("{}: cannot resolve shard '{}': {}", index, file, ec.message());
  if (is_within(resolved, root)) return resolved.string();
  if (root.parent_path().filename() == "snapshots" && is_within(resolved, root.parent_path().parent_path() / "blobs"))
    return resolved.string();
  return Error::invalid_file("{}: shard '{}' resolves to '{}', outside the model folder", index, file,
                             resolved.string());
}

}  // namespace

Expected<SafetensorsModel> SafetensorsModel::open(const std::string& path) {
  std::error_code ec;
  std::string target = path;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / "model.safetensors.index.json", ec)) {
      target = (dir / "model.safetensors.index.json").string();
    } else if (fs::exists(dir / "model.safetensors", ec)) {
      target = (dir / "model.safetensors").string();
    } else {
      return Error::not_found("{}: directory has neither model.safetensors.index.json nor model.safetensors", path);
    }
  }

  SafetensorsModel model;
  model.name_ = target;
  if (!ends_with(target, ".json")) {
    ASSIGN_OR_RETURN(SafetensorsFile single, SafetensorsFile::open(target));
    model.shards_.push_back(std::move(single));
    for (const SafetensorsTensor& t : model.shards_.back().tensors()) model.tensors_.emplace(t.name, &t);
    return model;
  }

  ASSIGN_OR_RETURN(MappedFile index_file, MappedFile::open(target));
  if (index_file.size() > kMaxIndexBytes)
    return Error::invalid_file("{}: index is {} bytes, more than the {}-byte limit", target, index_file.size(),
                               kMaxIndexBytes);
  const auto text = index_file.bytes();
  TRY(check_json_depth(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), target));
  nlohmann::json index = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded()) return Error::parse("{}: index is not valid JSON", target);
  if (!index.is_object()) return Error::invalid_file("{}: index is a {}, expected an object", target, index.type_name());
  if (auto meta = index.find("metadata"); meta != index.end() && meta->is_object()) {
    for (const auto& [k, v] : meta->items())
      model.index_metadata_.emplace(k, v.is_string() ? v.get<std::string>() : v.dump());
  }
  auto weight_map = index.find("weight_map");
  if (weight_map == index.end() || !weight_map->is_object())
    return Error::invalid_file("{}: index has no 'weight_map' object", target);

  std::map<std::string, size_t> shard_of_file;
  std::vector<std::pair<std::string, std::string>> entries;  // tensor, shard file
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string())
      return Error::invalid_file("{}: weight_map['{}'] is a {}, expected a file name", target, tensor, shard.type_name());
    const std::string& file = shard.get_ref<const std::string&>();
    if (!is_plain_file_name(file))
      return Error::invalid_file("{}: weight_map['{}'] = '{}' is not a plain file name next to the index", target,
                                 tensor, file);
    shard_of_file.emplace(file, 0);
    entries.emplace_back(tensor, file);
  }
  const fs::path dir = fs::path(target).parent_path();
  model.shards_.reserve(shard_of_file.size());
  for (auto& [file, slot] : shard_of_file) {
    ASSIGN_OR_RETURN(const std::string shard_path, contained_shard(dir, file, target));
    ASSIGN_OR_RETURN(SafetensorsFile shard, SafetensorsFile::open(shard_path));
    slot = model.shards_.size();
    model.shards_.push_back(std::move(shard));
  }
  for (const auto& [tensor, file] : entries) {
    const SafetensorsFile& shard = model.shards_[shard_of_file.at(file)];
    const SafetensorsTensor* t = shard.find(tensor);
    if (t == nullptr)
      return Error::invalid_file("{}: weight_map puts tensor '{}' in '{}', which does not contain it", target, tensor,
                                 file);
    model.tensors_.emplace(tensor, t);
  }
  return model;
}

std::vector<std::string_view> SafetensorsModel::tensor_names() const {
  std::vector<std::string_view> names;
  names.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) names.push_back(name);
  return names;
}

const SafetensorsTensor* SafetensorsModel::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

Expected<const SafetensorsTensor*> SafetensorsModel::tensor(std::string_view name) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) return Error::not_found("{}: tensor '{}' not found", name_, name);
  return t;
}

}  // namespace rlx::formats

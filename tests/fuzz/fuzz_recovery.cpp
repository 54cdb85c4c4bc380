// Fuzz target: durability recovery (src/durable/recovery.*) over a data
// directory whose files hold fuzzed bytes. kvd runs recover() at start on
// whatever is on disk; a damaged directory must never crash it: recovery
// refuses (RecoveryError, or std::system_error for I/O) or repairs.
//
// Input: opts u8 | then up to 6 files, each: sel u8 | len u16 LE | len bytes
// (the last may be short). sel & 3 picks the kind (log-, snapshot-,
// snapshot-*.tmp, a foreign name), (sel >> 2) & 3 the generation 1..4. opts
// bit 0: max_value 64 instead of the default (length fields above it are corruption).
// The files go to a fresh directory under /dev/shm (tmpfs: fsync is cheap).
// Properties:
// - recover() without --repair either succeeds or throws RecoveryError /
//   std::system_error; then a second recover() of what it left succeeds with
//   the same store (a torn tail was cut for good);
// - recover() with --repair on the original files likewise, and a plain
//   recover() of the directory it rewrote succeeds with the same store;
// - when the plain recover() succeeded, --repair loads the same store.
#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "durable/files.hpp"
#include "durable/recovery.hpp"
#include "fuzz_target.hpp"
#include "kv/store/store.hpp"

namespace {

namespace fs = std::filesystem;
using rkv::durable::RecoveryError;
using rkv::durable::RecoveryOptions;
using Contents = std::map<std::string, std::string, std::less<>>;

struct File {
  std::string name;
  std::vector<std::byte> bytes;
};

// A private directory under /dev/shm, removed when the process ends normally.
class WorkDir {
 public:
  WorkDir() {
    spdlog::set_level(spdlog::level::off);  // recovery logs every torn tail and repair
    const std::string base = fs::is_directory("/dev/shm") ? "/dev/shm" : fs::temp_directory_path().string();
    std::string tmpl = base + "/rkv-fuzz-recovery-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  ~WorkDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

const std::string& work_dir() {
  static const WorkDir dir;
  return dir.path();
}

std::string data_dir() { return work_dir() + "/data"; }

void write_files(const std::vector<File>& files) {
  std::error_code ec;
  fs::remove_all(data_dir(), ec);
  fs::create_directory(data_dir());
  for (const File& f : files) {
    const std::string path = data_dir() + "/" + f.name;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FUZZ_CHECK(fd >= 0);
    FUZZ_CHECK(::write(fd, f.bytes.data(), f.bytes.size()) == static_cast<ssize_t>(f.bytes.size()));
    ::close(fd);
  }
}

Contents contents(const rkv::kv::store::Store& s) {
  Contents c;
  s.for_each([&](std::string_view k, const rkv::kv::store::Store::Lookup& v) { c.emplace(k, v.value); });
  return c;
}

// recover() into a fresh Store: the contents, or nullopt if it refused.
std::optional<Contents> run(bool repair, std::uint64_t max_value) {
  rkv::kv::store::Store store;
  try {
    const auto r = rkv::durable::recover(RecoveryOptions{data_dir(), repair, max_value}, store);
    FUZZ_CHECK(r.next_seq >= 1 && r.generation >= 1);
    FUZZ_CHECK(r.rewritten ? repair : true);
  } catch (const RecoveryError&) {
    return std::nullopt;
  } catch (const std::system_error&) {
    return std::nullopt;
  }
  return contents(store);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  rkv::fuzz::Input in(data, size);
  const std::uint8_t opts = in.u8();
  const std::uint64_t max_value = (opts & 1) != 0 ? 64 : 0xFFFFFFFFu;
  std::vector<File> files;
  while (in.left() > 0 && files.size() < 6) {
    const std::uint8_t sel = in.u8();
    const std::uint64_t gen = 1 + ((sel >> 2) & 3);
    File f;
    switch (sel & 3) {
      case 0: f.name = rkv::durable::log_name(gen); break;
      case 1: f.name = rkv::durable::snapshot_name(gen); break;
      case 2: f.name = rkv::durable::snapshot_tmp_name(gen); break;
      default: f.name = "log-" + std::to_string(gen); break;  // not a name recovery reads
    }
    const auto b = in.bytes(in.u16());
    f.bytes.assign(b.begin(), b.end());
    files.push_back(std::move(f));
  }

  write_files(files);
  const auto plain = run(false, max_value);
  if (plain) {
    const auto again = run(false, max_value);  // what it left behind is clean
    FUZZ_CHECK(again && *again == *plain);
  }
  write_files(files);
  const auto repaired = run(true, max_value);
  if (repaired) {
    const auto again = run(false, max_value);  // the rewrite removed the damage
    FUZZ_CHECK(again && *again == *repaired);
  }
  if (plain) FUZZ_CHECK(repaired && *repaired == *plain);
  return 0;
}

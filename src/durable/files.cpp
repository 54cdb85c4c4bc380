// Data directory file names: see files.hpp.
#include "durable/files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <system_error>

namespace rkv::durable {

namespace {
std::string with_gen(const char* prefix, std::uint64_t gen, const char* suffix) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%016llx%s", prefix, static_cast<unsigned long long>(gen), suffix);
  return buf;
}
}  // namespace

std::string log_name(std::uint64_t gen) { return with_gen("log-", gen, ""); }
std::string snapshot_name(std::uint64_t gen) { return with_gen("snapshot-", gen, ""); }
std::string snapshot_tmp_name(std::uint64_t gen) { return with_gen("snapshot-", gen, ".tmp"); }

std::optional<std::uint64_t> parse_gen(std::string_view name, std::string_view prefix, std::string_view suffix) {
  if (name.size() != prefix.size() + 16 + suffix.size()) return std::nullopt;
  if (name.substr(0, prefix.size()) != prefix || name.substr(prefix.size() + 16) != suffix) return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : name.substr(prefix.size(), 16)) {
    std::uint64_t d;
    if (c >= '0' && c <= '9') {
      d = static_cast<std::uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      d = static_cast<std::uint64_t>(c - 'a' + 10);
    } else {
      return std::nullopt;
    }
    v = v << 4 | d;
  }
  return v;
}

DirListing list_dir(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) throw std::system_error(errno, std::system_category(), "opendir " + dir);
  DirListing out;
  for (errno = 0; const dirent* e = ::readdir(d.get()); errno = 0) {
    const std::string_view name = e->d_name;
    if (auto g = parse_gen(name, "log-")) {
      out.logs.push_back(*g);
    } else if (auto s = parse_gen(name, "snapshot-")) {
      out.snapshots.push_back(*s);
    } else if (parse_gen(name, "snapshot-", ".tmp")) {
      out.temporaries.emplace_back(name);
    }
  }
  if (errno != 0) throw std::system_error(errno, std::system_category(), "readdir " + dir);
  std::sort(out.logs.begin(), out.logs.end());
  std::sort(out.snapshots.begin(), out.snapshots.end());
  return out;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::system_category(), "open " + dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw std::system_error(err, std::system_category(), "fsync " + dir);
}

}  // namespace rkv::durable

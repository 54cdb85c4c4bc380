// The standalone driver of the fuzz targets (docs/fuzzing.md): runs one
// target's LLVMFuzzerTestOneInput over a seed corpus and then over a fixed
// number of deterministic mutations of it, with any compiler (the `fuzz`
// test suite builds it with GCC + ASan/UBSan, as CI does). libFuzzer
// (scripts/fuzz, clang) explores far more; this keeps every target and its
// seeds exercised on every test run and replays a crash file anywhere.
//
//   replay_<target> [--runs N] [--seed S] [--max-len L] PATH...
//     PATH     a corpus directory (every file in it) or one input file
//     --runs   mutated inputs after the corpus (default 0)
//     --seed   the mutation RNG's seed (default 1: runs are reproducible)
//     --max-len  longest mutated input (default 4096)
// A crashing input is written to ./replay-crash (and its path printed) before
// the process dies, so `replay_<target> replay-crash` or the libFuzzer binary
// reproduces it.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

// A sanitizer runtime, when one is linked, calls this back before it exits;
// weak, so a build without sanitizers (e.g. release with tests) still links
// (the header alone says nothing about whether the runtime is there).
extern "C" void __sanitizer_set_death_callback(void (*callback)()) __attribute__((weak));

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

// The input being run, for the crash hooks (plain globals: read from a signal handler).
const std::uint8_t* g_current = nullptr;
std::size_t g_current_size = 0;

void dump_current() {
  static bool done = false;
  if (done || g_current == nullptr) return;
  done = true;
  const int fd = ::open("replay-crash", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  std::size_t off = 0;
  while (off < g_current_size) {
    const ssize_t n = ::write(fd, g_current + off, g_current_size - off);
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  ::close(fd);
  static const char msg[] = "replay: the crashing input is in ./replay-crash\n";
  (void)!::write(2, msg, sizeof msg - 1);
}

void on_signal(int sig) {
  dump_current();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void run_one(const Bytes& in) {
  // A copy of exactly in.size() bytes, so an overread is caught by ASan.
  const auto buf = std::make_unique<std::uint8_t[]>(in.size() == 0 ? 1 : in.size());
  std::copy(in.begin(), in.end(), buf.get());
  g_current = buf.get();
  g_current_size = in.size();
  LLVMFuzzerTestOneInput(buf.get(), in.size());
  g_current = nullptr;
}

// xorshift64*: a tiny deterministic RNG.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed == 0 ? 0x9E3779B97F4A7C15ull : seed) {}
  std::uint64_t next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545F4914F6CDD1Dull;
  }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }

 private:
  std::uint64_t s_;
};

void put_le(Bytes& b, std::size_t at, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n && at + i < b.size(); ++i) b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}

// One libFuzzer-like mutation: bit flips, interesting values, inserts,
// erases, copies within the input and splices from another corpus input.
void mutate_once(Bytes& b, const std::vector<Bytes>& corpus, Rng& rng, std::size_t max_len) {
  static constexpr std::uint64_t kInteresting[] = {0, 1, 2, 7, 8, 16, 24, 32, 40, 64, 127, 128, 255, 256,
                                                   512, 1023, 1024, 1025, 4095, 4096, 0x7FFF, 0xFFFF,
                                                   0x10000, 0x7FFFFFFF, 0xFFFFFFFF, ~0ull};
  switch (rng.below(9)) {
    case 0:  // flip a bit
      if (!b.empty()) b[rng.below(b.size())] ^= static_cast<std::uint8_t>(1u << rng.below(8));
      break;
    case 1:  // random byte
      if (!b.empty()) b[rng.below(b.size())] = static_cast<std::uint8_t>(rng.next());
      break;
    case 2: {  // interesting value, 1/2/4/8 bytes
      if (b.empty()) break;
      const std::size_t width = std::size_t{1} << rng.below(4);
      put_le(b, rng.below(b.size()), kInteresting[rng.below(std::size(kInteresting))], width);
      break;
    }
    case 3: {  // insert random bytes
      const std::size_t n = 1 + rng.below(16);
      const std::size_t at = rng.below(b.size() + 1);
      Bytes ins(n);
      for (auto& x : ins) x = static_cast<std::uint8_t>(rng.next());
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
      break;
    }
    case 4: {  // erase a range
      if (b.empty()) break;
      const std::size_t at = rng.below(b.size());
      const std::size_t n = 1 + rng.below(std::min<std::size_t>(b.size() - at, 64));
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
      break;
    }
    case 5:  // truncate
      if (!b.empty()) b.resize(rng.below(b.size()));
      break;
    case 6: {  // copy a range over another place
      if (b.size() < 2) break;
      const std::size_t from = rng.below(b.size());
      const std::size_t to = rng.below(b.size());
      const std::size_t n = 1 + rng.below(std::min(b.size() - from, b.size() - to));
      std::copy_n(Bytes(b.begin() + static_cast<std::ptrdiff_t>(from),
                        b.begin() + static_cast<std::ptrdiff_t>(from + n)).begin(), n,
                  b.begin() + static_cast<std::ptrdiff_t>(to));
      break;
    }
    case 7: {  // splice: a piece of another input inserted
      if (corpus.empty()) break;
      const Bytes& o = corpus[rng.below(corpus.size())];
      if (o.empty()) break;
      const std::size_t from = rng.below(o.size());
      const std::size_t n = 1 + rng.below(o.size() - from);
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(rng.below(b.size() + 1)),
               o.begin() + static_cast<std::ptrdiff_t>(from), o.begin() + static_cast<std::ptrdiff_t>(from + n));
      break;
    }
    default: {  // a small integer nudged (lengths, counts)
      if (b.empty()) break;
      const std::size_t at = rng.below(b.size());
      b[at] = static_cast<std::uint8_t>(b[at] + (rng.below(2) == 0 ? 1 : -1));
      break;
    }
  }
  if (b.size() > max_len) b.resize(max_len);
}

Bytes read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--runs N] [--seed S] [--max-len L] PATH...\n", argv0);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t runs = 0;
  std::uint64_t seed = 1;
  std::size_t max_len = 4096;
  std::vector<fs::path> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::uint64_t {
      if (i + 1 >= argc) usage(argv[0]);
      return std::strtoull(argv[++i], nullptr, 0);
    };
    if (a == "--runs") runs = value();
    else if (a == "--seed") seed = value();
    else if (a == "--max-len") max_len = static_cast<std::size_t>(value());
    else if (a.starts_with("--")) usage(argv[0]);
    else paths.emplace_back(a);
  }
  if (paths.empty()) usage(argv[0]);

  ::signal(SIGABRT, on_signal);
  ::signal(SIGSEGV, on_signal);
  ::signal(SIGFPE, on_signal);
  ::signal(SIGILL, on_signal);
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(dump_current);

  std::vector<Bytes> corpus;
  for (const fs::path& p : paths) {
    if (fs::is_directory(p)) {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());  // the same order everywhere
      for (const auto& f : files) corpus.push_back(read_file(f));
    } else if (fs::is_regular_file(p)) {
      corpus.push_back(read_file(p));
    } else {
      std::fprintf(stderr, "replay: %s: no such file or directory\n", p.c_str());
      return 2;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  run_one(Bytes{});
  for (const Bytes& b : corpus) run_one(b);
  Rng rng(seed);
  for (std::uint64_t i = 0; i < runs; ++i) {
    Bytes b = corpus.empty() ? Bytes{} : corpus[rng.below(corpus.size())];
    const std::size_t n = 1 + rng.below(4);
    for (std::size_t k = 0; k < n; ++k) mutate_once(b, corpus, rng, max_len);
    run_one(b);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("replay: %zu corpus inputs + %llu mutations (seed %llu) in %.2f s, no crash\n", corpus.size() + 1,
              static_cast<unsigned long long>(runs), static_cast<unsigned long long>(seed), s);
  return 0;
}

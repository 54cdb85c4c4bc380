// kvload gen: writes a workload file (kv::load::generate_workload) for bigger runs.
//   kvload gen --keys 1000 --ops 10000 --get-ratio 0.7 --sizes 64:8,4k:2,1m:1 --seed 7 -o big.txt
// Same flags, same bytes, on every platform. Exit status: 0 written, 1 the
// output could not be written, 2 bad flags.
#include "cli.hpp"
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "kv/load/size_mix.hpp"
#include "kv/load/workload.hpp"
#include "kvload_flags.hpp"

namespace rkv::apps {

int kvload_gen_main(int argc, char** argv) {
  kv::load::GenOptions opt;
  std::string sizes = "64";
  std::string dist = "uniform";
  std::string out_path;
  bool no_preload = false;
  CLI::App app{"kvload gen: write a workload file (see docs/kvload.md)", "kvload gen"};
  app.add_option("--keys", opt.keys, "distinct keys, named <prefix><zero-padded index>")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--ops", opt.ops, "random operations after the preload")->capture_default_str();
  app.add_option("--get-ratio", opt.get_ratio, "probability that a random operation is a GET")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--sizes", sizes,
                 "value sizes SIZE[:WEIGHT],... with k/m suffixes, e.g. 64:8,4k:2,1m:1 (values of 4 KiB and "
                 "more take the rendezvous path)")
      ->capture_default_str();
  app.add_option("--dist", dist,
                 "which keys the random operations touch: uniform, zipf[:THETA] (YCSB's Zipfian, key 0 the "
                 "hottest; THETA in (0, 1), default 0.99) or latest[:THETA] (the most recently SET keys hottest)")
      ->capture_default_str();
  app.add_option("--seed", opt.seed, "random seed (values and the op sequence)")->capture_default_str();
  app.add_option("--prefix", opt.key_prefix, "key prefix")->capture_default_str();
  app.add_flag("--no-preload", no_preload, "do not SET every key once before the random operations");
  app.add_option("--literal-max", opt.literal_max,
                 "values up to this size are written out as text, larger ones as @size:seed")
      ->capture_default_str();
  app.add_option("-o,--out", out_path, "output file (default: standard output)");
  if (auto code = parse_cli(app, argc, argv)) return *code;
  std::string error;
  const auto mix = kv::load::parse_size_mix(sizes, error);
  if (!mix) {
    std::fprintf(stderr, "kvload gen: --sizes: %s\n", error.c_str());
    return 2;
  }
  opt.sizes = *mix;
  const auto key_dist = kv::load::parse_key_dist(dist, error);
  if (!key_dist) {
    std::fprintf(stderr, "kvload gen: --dist: %s\n", error.c_str());
    return 2;
  }
  opt.dist = *key_dist;
  opt.preload = !no_preload;
  if (const std::string why = kv::load::check_options(opt); !why.empty()) {
    std::fprintf(stderr, "kvload gen: %s\n", why.c_str());
    return 2;
  }
  if (out_path.empty()) {
    kv::load::generate_workload(std::cout, opt);
    std::cout.flush();
    if (!std::cout) {
      std::fprintf(stderr, "kvload gen: writing standard output failed\n");
      return 1;
    }
    return 0;
  }
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  if (!out) {
    std::fprintf(stderr, "kvload gen: %s: cannot create\n", out_path.c_str());
    return 1;
  }
  kv::load::generate_workload(out, opt);
  out.close();
  if (!out) {
    std::fprintf(stderr, "kvload gen: %s: write failed\n", out_path.c_str());
    return 1;
  }
  return 0;
}

}  // namespace rkv::apps

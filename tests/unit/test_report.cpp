// Unit tests for kvload's report: size classes, accounting, text table, and
// JSON that a real (independent, minimal) JSON parser accepts.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kv/load/report.hpp"

namespace rkv::kv::load {
namespace {

// --- A small strict JSON parser (RFC 8259), independent of the writer. ------
struct Json {
  enum class Type { null, boolean, number, string, array, object };
  Type type = Type::null;
  double number = 0;
  std::string str;
  std::vector<Json> items;
  std::map<std::string, Json> fields;
  std::vector<std::string> order;  // object keys as written
  const Json& operator[](const std::string& k) const { return fields.at(k); }
};

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}
  // nullopt-like: returns false on any syntax error, or trailing garbage.
  bool parse(Json& out) {
    ws();
    if (!value(out, 0)) return false;
    ws();
    return i_ == s_.size();
  }

 private:
  bool value(Json& v, int depth) {
    if (depth > 64 || i_ >= s_.size()) return false;
    switch (s_[i_]) {
      case '{': return object(v, depth);
      case '[': return array(v, depth);
      case '"': v.type = Json::Type::string; return string(v.str);
      case 't': v.type = Json::Type::boolean; return lit("true");
      case 'f': v.type = Json::Type::boolean; return lit("false");
      case 'n': v.type = Json::Type::null; return lit("null");
      default: v.type = Json::Type::number; return number(v.number);
    }
  }
  bool object(Json& v, int depth) {
    v.type = Json::Type::object;
    ++i_;
    ws();
    if (peek('}')) return ++i_, true;
    for (;;) {
      std::string key;
      ws();
      if (!peek('"') || !string(key)) return false;
      if (v.fields.count(key)) return false;  // duplicate keys: reject
      ws();
      if (!peek(':')) return false;
      ++i_;
      ws();
      Json child;
      if (!value(child, depth + 1)) return false;
      v.order.push_back(key);
      v.fields.emplace(key, std::move(child));
      ws();
      if (peek(',')) { ++i_; continue; }
      if (peek('}')) return ++i_, true;
      return false;
    }
  }
  bool array(Json& v, int depth) {
    v.type = Json::Type::array;
    ++i_;
    ws();
    if (peek(']')) return ++i_, true;
    for (;;) {
      ws();
      Json child;
      if (!value(child, depth + 1)) return false;
      v.items.push_back(std::move(child));
      ws();
      if (peek(',')) { ++i_; continue; }
      if (peek(']')) return ++i_, true;
      return false;
    }
  }
  bool string(std::string& out) {
    ++i_;  // opening quote
    while (i_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return true;
      if (c < 0x20) return false;  // raw control characters are not allowed
      if (c != '\\') { out += static_cast<char>(c); continue; }
      if (i_ >= s_.size()) return false;
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (i_ + 4 > s_.size()) return false;
          unsigned cp = 0;
          for (int k = 0; k < 4; ++k) {
            const char h = s_[i_++];
            cp <<= 4;
            if (h >= '0' && h <= '9') cp |= static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f') cp |= static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') cp |= static_cast<unsigned>(h - 'A' + 10);
            else return false;
          }
          append_utf8(out, cp);  // BMP only: all the writer emits
          break;
        }
        default: return false;
      }
    }
    return false;  // unterminated
  }
  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool number(double& out) {
    const std::size_t start = i_;
    if (peek('-')) ++i_;
    if (peek('0')) {
      ++i_;
    } else if (!digits()) {
      return false;
    }
    if (peek('.')) { ++i_; if (!digits()) return false; }
    if (peek('e') || peek('E')) {
      ++i_;
      if (peek('+') || peek('-')) ++i_;
      if (!digits()) return false;
    }
    out = std::stod(std::string(s_.substr(start, i_ - start)));
    return true;
  }
  bool digits() {
    const std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > start;
  }
  bool lit(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  bool peek(char c) const { return i_ < s_.size() && s_[i_] == c; }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

bool parse_json(std::string_view s, Json& out) { return JsonParser(s).parse(out); }

TEST(JsonParserSelfTest, RejectsBrokenJson) {
  Json j;
  EXPECT_TRUE(parse_json(R"({"a":[1,2.5,-3e2,"x\n",true,null],"b":{}})", j));
  for (const char* bad : {"{", R"({"a":1,})", R"({"a" 1})", "[1 2]", R"({"a":01})", "{\"a\":\"\x01\"}",
                          R"({"a":"\x"})", R"({"a":1}{)", R"({"a":nan})", R"({"a":1,"a":2})"}) {
    EXPECT_FALSE(parse_json(bad, j)) << bad;
  }
}

// --- Report ----------------------------------------------------------------

TEST(Report, SizeClassBoundary) {
  EXPECT_EQ(size_class(1, 0), SizeClass::eager);
  EXPECT_EQ(size_class(10, 4085), SizeClass::eager);       // 4095
  EXPECT_EQ(size_class(10, 4086), SizeClass::rendezvous);  // 4096
  EXPECT_EQ(size_class(1024, 3071), SizeClass::eager);
  EXPECT_EQ(size_class(1024, 3072), SizeClass::rendezvous);
  EXPECT_EQ(size_class(1, std::numeric_limits<std::uint64_t>::max()), SizeClass::rendezvous);
  EXPECT_EQ(to_string(SizeClass::eager), "eager");
  EXPECT_EQ(to_string(SizeClass::rendezvous), "rendezvous");
}

TEST(Report, IndexIsABijection) {
  std::vector<bool> seen(Report::kClasses, false);
  for (Op::Kind k : {Op::Kind::get, Op::Kind::set, Op::Kind::del}) {
    for (SizeClass c : {SizeClass::eager, SizeClass::rendezvous}) {
      const std::size_t i = Report::index(k, c);
      ASSERT_LT(i, Report::kClasses);
      EXPECT_FALSE(seen[i]);
      seen[i] = true;
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 6);
}

Report sample() {
  Report r;
  r.name = "bench \"A\"\\path\n\ttab \x01 caf\xc3\xa9 bad\xff";
  r.seconds = 2.0;
  r.mismatches = 3;
  for (int i = 1; i <= 1000; ++i) r.record(Op::Kind::get, SizeClass::eager, 100, 10000u + i, true);
  r.record(Op::Kind::get, SizeClass::eager, 0, 0, false);
  // Of the 1000 successful GETs, 750 found their key and 250 did not (the failed one is neither).
  for (int i = 0; i < 1000; ++i) r.record_get_found(i % 4 != 0);
  for (int i = 0; i < 10; ++i) r.record(Op::Kind::set, SizeClass::rendezvous, 1 << 20, 2000000, true);
  r.record(Op::Kind::set, SizeClass::rendezvous, 0, 0, false);
  r.record(Op::Kind::set, SizeClass::rendezvous, 0, 0, false);
  for (int i = 0; i < 4; ++i) r.record(Op::Kind::del, SizeClass::eager, 3, 5000, true);
  r.record(Op::Kind::del, SizeClass::eager, 0, 0, false);
  return r;
}

TEST(Report, Accounting) {
  const Report r = sample();
  const ClassStats& g = r.at(Op::Kind::get, SizeClass::eager);
  EXPECT_EQ(g.count, 1001u);
  EXPECT_EQ(g.errors, 1u);
  EXPECT_EQ(g.bytes, 100000u);
  EXPECT_EQ(g.latency.count(), 1000u);  // failures carry no latency
  EXPECT_EQ(r.ops(), 1001u + 12u + 5u);
  EXPECT_EQ(r.errors(), 4u);
  EXPECT_DOUBLE_EQ(r.ops_per_s(), 1018.0 / 2.0);
  EXPECT_EQ(r.at(Op::Kind::set, SizeClass::eager).count, 0u);
  const ClassStats& d = r.at(Op::Kind::del, SizeClass::eager);
  EXPECT_EQ(d.count, 5u);
  EXPECT_EQ(d.errors, 1u);
  EXPECT_EQ(d.bytes, 12u);
  EXPECT_EQ(r.at(Op::Kind::del, SizeClass::rendezvous).count, 0u);
  EXPECT_EQ(r.get_hits, 750u);
  EXPECT_EQ(r.get_misses, 250u);
}

TEST(Report, Merge) {
  Report a = sample();
  Report b = sample();
  b.seconds = 5.0;
  a.merge(b);
  EXPECT_EQ(a.ops(), 2u * 1018u);
  EXPECT_EQ(a.errors(), 8u);
  EXPECT_EQ(a.at(Op::Kind::del, SizeClass::eager).count, 10u);
  EXPECT_EQ(a.mismatches, 6u);
  EXPECT_EQ(a.get_hits, 1500u);
  EXPECT_EQ(a.get_misses, 500u);
  EXPECT_EQ(a.seconds, 5.0);
  EXPECT_EQ(a.at(Op::Kind::set, SizeClass::rendezvous).latency.count(), 20u);
}

TEST(Report, JsonParsesAndHasTheKeys) {
  const Report r = sample();
  const std::string text = to_json(r);
  Json j;
  ASSERT_TRUE(parse_json(text, j)) << text;
  ASSERT_EQ(j.type, Json::Type::object);
  for (const char* k : {"name", "ops", "errors", "seconds", "ops_per_s", "mismatches", "get_hits", "get_misses",
                        "latency_ns", "classes"}) {
    EXPECT_TRUE(j.fields.count(k)) << k;
  }
  // The run's latency over every successful operation: 1000 GETs of 10001..11000 ns,
  // 10 SETs of 2 ms and 4 DELs of 5 us: the median is a GET's, the p99 at least the slowest GET's.
  EXPECT_EQ(j["latency_ns"]["min"].number, 5000.0);
  EXPECT_EQ(j["latency_ns"]["max"].number, 2000000.0);
  EXPECT_NEAR(j["latency_ns"]["p50"].number, 10500.0, 10500.0 * 0.01);
  EXPECT_GE(j["latency_ns"]["p99"].number, 11000.0 * 0.99);  // buckets are 1/256 of an octave
  EXPECT_EQ(j["ops"].number, 1018.0);
  EXPECT_EQ(j["errors"].number, 4.0);
  EXPECT_EQ(j["seconds"].number, 2.0);
  EXPECT_NEAR(j["ops_per_s"].number, 509.0, 1e-3);
  EXPECT_EQ(j["mismatches"].number, 3.0);
  EXPECT_EQ(j["get_hits"].number, 750.0);
  EXPECT_EQ(j["get_misses"].number, 250.0);
  // The name survives escaping; the invalid byte became U+FFFD.
  EXPECT_EQ(j["name"].str, "bench \"A\"\\path\n\ttab \x01 caf\xc3\xa9 bad\xef\xbf\xbd");

  const Json& classes = j["classes"];
  ASSERT_EQ(classes.type, Json::Type::array);
  ASSERT_EQ(classes.items.size(), 12u);
  std::map<std::string, const Json*> by_name;
  for (const Json& c : classes.items) {
    for (const char* k : {"op", "size_class", "count", "errors", "bytes", "ops_per_s", "mb_per_s",
                          "latency_ns"}) {
      ASSERT_TRUE(c.fields.count(k)) << k;
    }
    for (const char* k : {"min", "mean", "p50", "p99", "p99_9", "max"}) {
      ASSERT_TRUE(c["latency_ns"].fields.count(k)) << k;
    }
    by_name[c["op"].str + "/" + c["size_class"].str] = &c;
  }
  ASSERT_EQ(by_name.size(), 12u);
  EXPECT_EQ((*by_name.at("call/rendezvous"))["count"].number, 0.0);
  const Json& g = *by_name.at("get/eager");
  EXPECT_EQ(g["count"].number, 1001.0);
  EXPECT_EQ(g["errors"].number, 1.0);
  EXPECT_EQ(g["bytes"].number, 100000.0);
  EXPECT_NEAR(g["ops_per_s"].number, 500.5, 1e-3);
  EXPECT_NEAR(g["mb_per_s"].number, 0.05, 1e-3);
  EXPECT_NEAR(g["latency_ns"]["p50"].number, 10500.0, 10500.0 * 0.01);
  EXPECT_EQ(g["latency_ns"]["max"].number, 11000.0);
  EXPECT_EQ(g["latency_ns"]["min"].number, 10001.0);
  const Json& s = *by_name.at("set/rendezvous");
  EXPECT_EQ(s["count"].number, 12.0);
  EXPECT_NEAR(s["mb_per_s"].number, 10.0 * (1 << 20) / 1e6 / 2.0, 1e-3);
  EXPECT_EQ(s["latency_ns"]["p99"].number, 2000000.0);
  EXPECT_EQ(by_name.at("set/eager")->fields.at("count").number, 0.0);
  const Json& d = *by_name.at("del/eager");
  EXPECT_EQ(d["count"].number, 5.0);
  EXPECT_EQ(d["errors"].number, 1.0);
  EXPECT_EQ(d["latency_ns"]["max"].number, 5000.0);
  EXPECT_EQ(by_name.at("del/rendezvous")->fields.at("count").number, 0.0);
}

TEST(Report, JsonOfEmptyAndZeroTimeReport) {
  Report r;
  r.seconds = std::numeric_limits<double>::quiet_NaN();  // must not print "nan"
  Json j;
  const std::string text = to_json(r);
  ASSERT_TRUE(parse_json(text, j)) << text;
  EXPECT_EQ(j["ops"].number, 0.0);
  EXPECT_EQ(j["ops_per_s"].number, 0.0);
  EXPECT_EQ(j["name"].str, "");
  r.seconds = 0;
  r.record(Op::Kind::get, SizeClass::eager, 10, 100, true);
  Json j2;
  ASSERT_TRUE(parse_json(to_json(r), j2));
  EXPECT_EQ(j2["ops_per_s"].number, 0.0);  // no division by zero -> inf
}

TEST(Report, JsonEscape) {
  EXPECT_EQ(json_escape("plain"), "plain");
  EXPECT_EQ(json_escape("q\"b\\"), "q\\\"b\\\\");
  EXPECT_EQ(json_escape(std::string_view("\0\x1f\n", 3)), "\\u0000\\u001f\\n");
  EXPECT_EQ(json_escape("\xe2\x82\xac"), "\xe2\x82\xac");  // valid UTF-8 passes through
  EXPECT_EQ(json_escape("\xc0\xaf"), "\\ufffd\\ufffd");    // overlong
  EXPECT_EQ(json_escape("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd");  // surrogate
  EXPECT_EQ(json_escape("\xf4\x90\x80\x80"), "\\ufffd\\ufffd\\ufffd\\ufffd");  // > U+10FFFF
  EXPECT_EQ(json_escape("\xe2\x82"), "\\ufffd\\ufffd");    // truncated
}

TEST(Report, TextTable) {
  Report r = sample();
  r.name = "w.txt";
  const std::string t = to_text(r);
  EXPECT_EQ(t.rfind("workload: w.txt\n", 0), 0u) << t;
  EXPECT_NE(t.find("p99.9"), std::string::npos) << t;
  EXPECT_NE(t.find("GET  eager"), std::string::npos) << t;
  EXPECT_NE(t.find("SET  rendezvous"), std::string::npos) << t;
  EXPECT_EQ(t.find("SET  eager"), std::string::npos) << t;  // no ops, no row
  EXPECT_NE(t.find("DEL  eager"), std::string::npos) << t;
  EXPECT_EQ(t.find("DEL  rendezvous"), std::string::npos) << t;
  EXPECT_NE(t.find("total: 1018 ops, 4 errors, 2.000 s, 509.0 ops/s, 3 mismatches"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("gets: 750 hits, 250 misses (hit ratio 75.00 %)\n"), std::string::npos) << t;
  EXPECT_NE(t.find("2.00ms"), std::string::npos) << t;  // SET latency, human units
  EXPECT_NE(t.find("10.5us"), std::string::npos) << t;  // GET p50
  // Rows are aligned: header and data lines have the same length.
  std::vector<std::size_t> widths;
  std::size_t start = t.find('\n') + 1;  // skip the "workload:" line
  for (int row = 0; row < 3; ++row) {
    const std::size_t end = t.find('\n', start);
    widths.push_back(end - start);
    start = end + 1;
  }
  EXPECT_EQ(widths[0], widths[1]) << t;
  EXPECT_EQ(widths[0], widths[2]) << t;
  EXPECT_NE(to_text(Report{}).find("(no operations)"), std::string::npos);
  Report failed;
  failed.record(Op::Kind::set, SizeClass::eager, 0, 0, false);
  const std::string f = to_text(failed);
  EXPECT_EQ(f.find("0ns"), std::string::npos) << f;  // no latency, not zero latency
  EXPECT_NE(f.find(" -"), std::string::npos) << f;
  EXPECT_EQ(f.find("gets:"), std::string::npos) << f;  // no successful GET, no hit line
}

// Several servers: per-server counts, shard_down and its slowest, merged by position.
TEST(Report, ShardCountsAddUpAndPrint) {
  Report a;
  a.shards = {{"h1:7471", 0, 0, 0}, {"h2:7471", 0, 0, 0}};
  a.record_shard(0, true, false, 10);
  a.record_shard(1, false, true, 1'500'000'000);
  a.record_shard(1, false, false, 7);
  a.record_shard(5, true, false, 1);  // no such shard: only the totals would count a shard_down
  Report b;
  b.shards = {{"h1:7471", 0, 0, 0}, {"h2:7471", 0, 0, 0}};
  b.record_shard(1, false, true, 20);
  a.merge(b);
  ASSERT_EQ(a.shards.size(), 2u);
  EXPECT_EQ(a.shards[0].ops, 1u);
  EXPECT_EQ(a.shards[0].errors, 0u);
  EXPECT_EQ(a.shards[1].ops, 3u);
  EXPECT_EQ(a.shards[1].errors, 3u);
  EXPECT_EQ(a.shards[1].shard_down, 2u);
  EXPECT_EQ(a.shard_down, 2u);
  EXPECT_EQ(a.shard_down_max_ns, 1'500'000'000u);
  const std::string j = to_json(a);
  EXPECT_NE(j.find(R"("shard_down":2,"shard_down_max_ns":1500000000,"shards":[{"server":"h1:7471","ops":1,"errors":0,"shard_down":0},{"server":"h2:7471","ops":3,"errors":3,"shard_down":2}]})"),
            std::string::npos)
      << j;
  const std::string t = to_text(a);
  EXPECT_NE(t.find("server h2:7471: 3 ops, 3 errors, 2 shard_down\n"), std::string::npos) << t;
  EXPECT_NE(t.find("shard_down: 2 ops failed"), std::string::npos) << t;
  // One server and no failures: no per-server lines in the text.
  Report one;
  one.shards = {{"h1:7471", 0, 0, 0}};
  one.record_shard(0, true, false, 1);
  EXPECT_EQ(to_text(one).find("server h1"), std::string::npos);
}

TEST(Report, ClientCountersGoIntoTheJsonAndAddUpByName) {
  Report a;
  EXPECT_EQ(to_json(a).find(R"("client")"), std::string::npos);  // none recorded: no key
  a.client = {{"sends_posted", 3}, {"onesided_fallbacks", 1}};
  Report b;
  b.client = {{"onesided_fallbacks", 4}, {"rdma_reads", 7}};
  a.merge(b);
  const std::string j = to_json(a);
  EXPECT_NE(j.find(R"("shards":[],"client":{"sends_posted":3,"onesided_fallbacks":5,"rdma_reads":7}})"), std::string::npos) << j;
  Json parsed;
  EXPECT_TRUE(parse_json(j, parsed)) << j;
}

}  // namespace
}  // namespace rkv::kv::load

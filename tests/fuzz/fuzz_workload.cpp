// Fuzz target: kvload's workload file parser (src/kv/load/workload.*), which
// reads files and interactive lines from users.
//
// Input: the file's bytes; the first byte picks tight or default limits.
// Properties: parse_workload never crashes and gives either ops or errors,
// never both; at most max_errors errors kept, the rest counted; ops and
// errors in line order; every op has a key of 1..max_key bytes without
// blanks and a value within max_value, whose bytes write_value produces and
// matches() accepts. parse_command on each line agrees with the file parse.
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_target.hpp"
#include "kv/load/workload.hpp"

namespace {

using namespace rkv::kv::load;

bool blank(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r'; }

void check_op(const Op& op, const ParseLimits& limits) {
  FUZZ_CHECK(!op.key.empty() && op.key.size() <= limits.max_key);
  for (const char c : op.key) FUZZ_CHECK(!blank(c) && c != '\n');
  FUZZ_CHECK(!to_string(op.kind).empty());
  const std::uint64_t size = value_size(op.value);
  if (op.kind != Op::Kind::set) {
    FUZZ_CHECK(size == 0);
    return;
  }
  FUZZ_CHECK(size <= limits.max_value);
  if (size > (std::uint64_t{1} << 16)) return;  // tight limits keep most values small enough to build
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  write_value(op.value, bytes);
  FUZZ_CHECK(matches(op.value, bytes));
  if (!bytes.empty()) {
    bytes.back() ^= std::byte{1};
    FUZZ_CHECK(!matches(op.value, bytes));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  rkv::fuzz::Input in(data, size);
  const std::uint8_t mode = in.u8();
  ParseLimits limits;
  if ((mode & 1) != 0) {
    limits.max_key = 1 + mode % 16;
    limits.max_value = std::uint64_t{mode} << 6;
    limits.max_errors = 1 + mode % 4;
  }
  const std::string text(rkv::fuzz::as_text(in.rest()));
  std::istringstream file(text);
  const ParseResult r = parse_workload(file, limits);
  FUZZ_CHECK(r.ops.empty() || r.errors.empty());
  FUZZ_CHECK(r.errors.size() <= limits.max_errors);
  FUZZ_CHECK(r.errors_omitted == 0 || r.errors.size() == limits.max_errors);
  unsigned last = 0;
  for (const ParseError& e : r.errors) {
    FUZZ_CHECK(e.line > last && !e.message.empty());
    last = e.line;
  }
  last = 0;
  for (const Op& op : r.ops) {
    FUZZ_CHECK(op.line > last);
    last = op.line;
    check_op(op, limits);
  }

  // Line by line, as kvload's interactive mode reads them.
  std::size_t start = 0;
  unsigned line_no = 0;
  std::size_t op_index = 0;
  bool any_error = false;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ++line_no;
    std::string error;
    const auto op = parse_command(std::string_view(text).substr(start, end - start), error, limits);
    if (op) {
      FUZZ_CHECK(error.empty());
      check_op(*op, limits);
      if (r.ok()) {  // the file parse found this very op on this line
        FUZZ_CHECK(op_index < r.ops.size() && r.ops[op_index].line == line_no);
        FUZZ_CHECK(r.ops[op_index].key == op->key && r.ops[op_index].kind == op->kind &&
                   r.ops[op_index].value == op->value);
        ++op_index;
      }
    } else if (!error.empty()) {
      any_error = true;
    }
    start = end + 1;
  }
  if (r.ok()) FUZZ_CHECK(op_index == r.ops.size() && !any_error);
  if (!r.ok() && r.errors.front().line <= line_no) FUZZ_CHECK(any_error);
  return 0;
}

#include "core/base/text_diff.hpp"

#include <algorithm>
#include <vector>

namespace kforge::core {
namespace {

// Each line with its '\n': a last line without one differs from the same text with it.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    size_t end = text.find('\n');
    end = end == std::string_view::npos ? text.size() : end + 1;
    lines.push_back(text.substr(0, end));
    text.remove_prefix(end);
  }
  return lines;
}

struct Op {
  char kind;  // ' ' both, '-' only in `was`, '+' only in `now`
  size_t line;  // into `was` for ' ' and '-', into `now` for '+'
};

// The edit script from a[lo_a, hi_a) to b[lo_b, hi_b), appended to `ops`: Myers' greedy
// shortest script, with the V array of every round kept for the way back (O(D^2) memory).
// False (nothing appended) when it needs more than `max_edits` edits.
bool myers(const std::vector<std::string_view>& a, size_t lo_a, size_t hi_a,
           const std::vector<std::string_view>& b, size_t lo_b, size_t hi_b, size_t max_edits,
           std::vector<Op>& ops) {
  const long n = long(hi_a - lo_a), m = long(hi_b - lo_b);
  auto same = [&](long x, long y) { return a[lo_a + x] == b[lo_b + y]; };
  std::vector<std::vector<long>> trace;  // trace[d][k + d]: furthest x on diagonal k
  long d_end = -1;
  for (long d = 0; d <= std::min<long>(n + m, long(max_edits)) && d_end < 0; ++d) {
    std::vector<long> v(size_t(2 * d + 1), 0);
    auto prev = [&](long k) { return trace.back()[size_t(k + d - 1)]; };
    for (long k = -d; k <= d; k += 2) {
      long x = d == 0 ? 0 : (k == -d || (k != d && prev(k - 1) < prev(k + 1))) ? prev(k + 1) : prev(k - 1) + 1;
      long y = x - k;
      while (x < n && y < m && same(x, y)) ++x, ++y;
      v[size_t(k + d)] = x;
      if (x >= n && y >= m) d_end = d;
    }
    trace.push_back(std::move(v));
  }
  if (d_end < 0) return false;
  std::vector<Op> back;  // reversed
  long x = n, y = m;
  for (long d = d_end; d > 0; --d) {
    const auto& v = trace[size_t(d - 1)];
    auto prev = [&](long k) { return v[size_t(k + d - 1)]; };
    const long k = x - y;
    const bool down = k == -d || (k != d && prev(k - 1) < prev(k + 1));  // an insertion
    const long pk = down ? k + 1 : k - 1;
    const long px = prev(pk), py = px - pk;
    while (x > (down ? px : px + 1) && y > (down ? py + 1 : py)) {  // the snake after the edit
      --x, --y;
      back.push_back({' ', size_t(lo_a + x)});
    }
    if (down) back.push_back({'+', size_t(lo_b + --y)});
    else back.push_back({'-', size_t(lo_a + --x)});
  }
  while (x > 0) back.push_back({' ', size_t(lo_a + --x)});
  ops.insert(ops.end(), back.rbegin(), back.rend());
  return true;
}

std::string range(size_t start, size_t count) {
  // GNU diff: a one-line range is its line alone; an empty one names the line before it.
  if (count == 1) return std::to_string(start + 1);
  return std::to_string(count == 0 ? start : start + 1) + "," + std::to_string(count);
}

}  // namespace

std::string unified_diff(std::string_view was, std::string_view now, std::string_view from,
                         std::string_view to, const DiffOptions& options) {
  if (was == now) return "";
  const auto a = split_lines(was), b = split_lines(now);
  size_t head = 0;
  while (head < a.size() && head < b.size() && a[head] == b[head]) ++head;
  size_t tail = 0;
  while (tail < a.size() - head && tail < b.size() - head &&
         a[a.size() - 1 - tail] == b[b.size() - 1 - tail])
    ++tail;

  std::vector<Op> ops;
  for (size_t i = 0; i < head; ++i) ops.push_back({' ', i});
  if (!myers(a, head, a.size() - tail, b, head, b.size() - tail, options.max_edits, ops)) {
    for (size_t i = head; i < a.size() - tail; ++i) ops.push_back({'-', i});
    for (size_t i = head; i < b.size() - tail; ++i) ops.push_back({'+', i});
  }
  for (size_t i = 0; i < tail; ++i) ops.push_back({' ', a.size() - tail + i});

  // Where each op starts in either text, for the hunk headers.
  std::vector<size_t> at_a(ops.size() + 1, 0), at_b(ops.size() + 1, 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    at_a[i + 1] = at_a[i] + (ops[i].kind != '+');
    at_b[i + 1] = at_b[i] + (ops[i].kind != '-');
  }
  std::string out = "--- " + std::string(from) + "\n+++ " + std::string(to) + "\n";
  const size_t c = options.context;
  size_t i = 0;
  while (i < ops.size()) {
    while (i < ops.size() && ops[i].kind == ' ') ++i;
    if (i == ops.size()) break;
    // A hunk: changes no more than 2 * context equal lines apart, with context around.
    const size_t start = i > c ? i - c : 0;
    size_t last = i;
    for (size_t j = i; j < ops.size() && j <= last + 2 * c; ++j) {
      if (ops[j].kind != ' ') last = j;
    }
    const size_t end = std::min(ops.size(), last + c + 1);
    out += "@@ -" + range(at_a[start], at_a[end] - at_a[start]) + " +" +
           range(at_b[start], at_b[end] - at_b[start]) + " @@\n";
    for (size_t j = start; j < end; ++j) {
      const std::string_view line = ops[j].kind == '+' ? b[ops[j].line] : a[ops[j].line];
      out += ops[j].kind;
      out += line;
      if (line.empty() || line.back() != '\n') out += "\n\\ No newline at end of file\n";
    }
    if (out.size() > options.max_bytes) {
      out.resize(options.max_bytes);
      out += "\n... (the diff goes on; cut at " + std::to_string(options.max_bytes) + " bytes)\n";
      return out;
    }
    i = end;
  }
  return out;
}

}  // namespace kforge::core

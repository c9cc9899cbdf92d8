// sacreBLEU's TER (its Tercom reimplementation): statistics [edits of the best reference, average
// reference length] per segment. Edits are word shifts, found greedily as Tercom does, plus the
// edit distance computed in a beam around the length-scaled diagonal. The constants, the order in
// which shift candidates are tried and the way ties are broken are sacreBLEU's (metrics/lib_ter.py).
#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "fairseq_cpp/scoring/metrics.h"
#include "fairseq_cpp/scoring/text_rules.h"
#include "fairseq_cpp/scoring/unicode.h"

namespace fairseq_cpp::scoring {
namespace {

using Words = std::vector<std::u32string>;

constexpr int64_t kMaxShiftSize = 10;
constexpr int64_t kMaxShiftDist = 50;
constexpr int64_t kBeamWidth = 25;
constexpr int64_t kMaxShiftCandidates = 1000;
constexpr int64_t kInfinity = 10000000000000000;  // int(1e16)

enum class Op : char { ins = 'i', del = 'd', nop = ' ', sub = 's', undef = 'x' };

struct Cell {
  int64_t cost;
  Op op;
};

// Edit distance from `hyp` to `ref` in a beam around the diagonal, and the operations (lib_ter's
// BeamEditDistance without its cache, which only saves time: rows depend on the prefix alone).
std::pair<int64_t, std::vector<Op>> beam_edit_distance(const Words& hyp, const Words& ref) {
  const size_t n_h = hyp.size(), n_r = ref.size();
  std::vector<std::vector<Cell>> dist(n_h + 1, std::vector<Cell>(n_r + 1, Cell{kInfinity, Op::undef}));
  for (size_t j = 0; j <= n_r; ++j) dist[0][j] = {static_cast<int64_t>(j), Op::ins};
  const double ratio = n_h > 0 ? static_cast<double>(n_r) / static_cast<double>(n_h) : 1.0;
  const auto beam = static_cast<int64_t>(kBeamWidth < ratio / 2 ? std::ceil(ratio / 2 + kBeamWidth) : kBeamWidth);
  for (size_t i = 1; i <= n_h; ++i) {
    const auto diag = static_cast<int64_t>(std::floor(static_cast<double>(i) * ratio));
    const int64_t min_j = std::max<int64_t>(0, diag - beam);
    int64_t max_j = std::min<int64_t>(static_cast<int64_t>(n_r) + 1, diag + beam);
    if (i == n_h) max_j = static_cast<int64_t>(n_r) + 1;
    for (int64_t jj = min_j; jj < max_j; ++jj) {
      const auto j = static_cast<size_t>(jj);
      if (j == 0) {
        dist[i][0] = {dist[i - 1][0].cost + 1, Op::del};
        continue;
      }
      const bool same = hyp[i - 1] == ref[j - 1];
      const Cell ops[] = {{dist[i - 1][j - 1].cost + (same ? 0 : 1), same ? Op::nop : Op::sub},
                          {dist[i - 1][j].cost + 1, Op::del},
                          {dist[i][j - 1].cost + 1, Op::ins}};
      for (const Cell& o : ops)
        if (dist[i][j].cost > o.cost) dist[i][j] = o;
    }
  }
  std::vector<Op> trace;
  size_t i = n_h, j = n_r;
  while (i > 0 || j > 0) {
    const Op op = dist[i][j].op;
    trace.push_back(op);
    if (op == Op::sub || op == Op::nop) {
      --i;
      --j;
    } else if (op == Op::ins) {
      --j;
    } else if (op == Op::del) {
      --i;
    } else {
      break;  // outside the beam: lib_ter raises here; never reached on real input
    }
  }
  std::reverse(trace.begin(), trace.end());
  return {dist[n_h][n_r].cost, trace};
}

Words perform_shift(const Words& w, size_t start, size_t length, size_t target) {
  Words out;
  out.reserve(w.size());
  // Python's slices, which clamp to the list.
  auto append = [&](size_t from, size_t to) {
    to = std::min(to, w.size());
    if (from < to) out.insert(out.end(), w.begin() + static_cast<std::ptrdiff_t>(from), w.begin() + static_cast<std::ptrdiff_t>(to));
  };
  if (target < start) {
    append(0, target);
    append(start, start + length);
    append(target, start);
    append(start + length, w.size());
  } else if (target > start + length) {
    append(0, start);
    append(start + length, target);
    append(start, start + length);
    append(target, w.size());
  } else {
    append(0, start);
    append(start + length, length + target);
    append(start, start + length);
    append(length + target, w.size());
  }
  return out;
}

// The best shift of `hyp` towards `ref`: (gain, shifted words); candidates are counted in `checked`.
std::pair<int64_t, Words> best_shift(const Words& hyp, const Words& ref, int64_t& checked) {
  const auto [pre_score, inverse_trace] = beam_edit_distance(hyp, ref);
  // The trace rewrites ref into hyp; flipped, it rewrites hyp into ref: an alignment ref -> hyp.
  std::vector<int64_t> align(ref.size(), -1);
  std::vector<int> ref_err, hyp_err;
  int64_t pos_h = -1, pos_r = -1;
  for (Op op : inverse_trace) {
    if (op == Op::ins) op = Op::del;
    else if (op == Op::del) op = Op::ins;
    if (op == Op::nop || op == Op::sub) {
      align[static_cast<size_t>(++pos_r)] = ++pos_h;
      hyp_err.push_back(op == Op::sub);
      ref_err.push_back(op == Op::sub);
    } else if (op == Op::ins) {
      ++pos_h;
      hyp_err.push_back(1);
    } else if (op == Op::del) {
      align[static_cast<size_t>(++pos_r)] = pos_h;
      ref_err.push_back(1);
    }
  }
  auto errors = [](const std::vector<int>& err, size_t from, size_t length) {
    int sum = 0;
    for (size_t k = from; k < from + length && k < err.size(); ++k) sum += err[k];
    return sum;
  };
  bool found = false;
  std::tuple<int64_t, int64_t, int64_t, int64_t, Words> best;
  auto finish = [&]() -> std::pair<int64_t, Words> {
    if (!found) return {0, hyp};
    return {std::get<0>(best), std::move(std::get<4>(best))};
  };
  const size_t n_h = hyp.size(), n_r = ref.size();
  for (size_t start_h = 0; start_h < n_h; ++start_h) {
    for (size_t start_r = 0; start_r < n_r; ++start_r) {
      if (std::abs(static_cast<int64_t>(start_r) - static_cast<int64_t>(start_h)) > kMaxShiftDist) continue;
      for (size_t length = 0; hyp[start_h + length] == ref[start_r + length] &&
                              static_cast<int64_t>(length) < kMaxShiftSize;) {
        ++length;
        // Each matching span hyp[start_h..+length) = ref[start_r..+length) is a candidate.
        const bool useful = errors(hyp_err, start_h, length) != 0 && errors(ref_err, start_r, length) != 0 &&
                            !(static_cast<int64_t>(start_h) <= align[start_r] &&
                              align[start_r] < static_cast<int64_t>(start_h + length));
        if (useful) {
          int64_t previous = -1;
          for (int64_t offset = -1; offset < static_cast<int64_t>(length); ++offset) {
            int64_t idx;
            if (static_cast<int64_t>(start_r) + offset == -1) {
              idx = 0;
            } else if (static_cast<int64_t>(start_r) + offset < static_cast<int64_t>(n_r)) {
              idx = align[static_cast<size_t>(static_cast<int64_t>(start_r) + offset)] + 1;
            } else {
              break;
            }
            if (idx == previous) continue;
            previous = idx;
            Words shifted = perform_shift(hyp, start_h, length, static_cast<size_t>(idx));
            const int64_t gain = pre_score - beam_edit_distance(shifted, ref).first;
            auto candidate = std::make_tuple(gain, static_cast<int64_t>(length), -static_cast<int64_t>(start_h), -idx,
                                             std::move(shifted));
            ++checked;
            if (!found || candidate > best) {
              best = std::move(candidate);
              found = true;
            }
          }
          // lib_ter stops right after the candidate pair that reaches the limit.
          if (checked >= kMaxShiftCandidates) return finish();
        }
        if (n_h == start_h + length || n_r == start_r + length) break;
      }
    }
  }
  return finish();
}

// lib_ter's translation_edit_rate: (edits, reference length).
std::pair<int64_t, int64_t> translation_edit_rate(const Words& hyp, const Words& ref) {
  if (ref.empty()) return {static_cast<int64_t>(hyp.size()), 0};
  int64_t shifts = 0, checked = 0;
  Words input = hyp;
  while (true) {
    auto [delta, shifted] = best_shift(input, ref, checked);
    if (checked >= kMaxShiftCandidates || delta <= 0) break;
    ++shifts;
    input = std::move(shifted);
  }
  return {shifts + beam_edit_distance(input, ref).first, static_cast<int64_t>(ref.size())};
}

bool in(char32_t c, std::initializer_list<std::pair<char32_t, char32_t>> ranges) {
  for (const auto& [first, last] : ranges)
    if (c >= first && c <= last) return true;
  return false;
}

// Tercom's Asian punctuation and full-width punctuation (sacreBLEU's ASIAN_PUNCT, FULL_WIDTH_PUNCT).
bool is_asian_punct(char32_t c) {
  return in(c, {{0x3001, 0x3002}, {0x3008, 0x3011}, {0x3014, 0x301F}, {0xFF61, 0xFF65}, {0x30FB, 0x30FB}});
}
bool is_full_width_punct(char32_t c) {
  return in(c, {{0xFF0E, 0xFF0E}, {0xFF0C, 0xFF0C}, {0xFF1F, 0xFF1F}, {0xFF1A, 0xFF1A}, {0xFF1B, 0xFF1B},
                {0xFF01, 0xFF01}, {0xFF02, 0xFF02}, {0xFF08, 0xFF09}});
}

std::u32string normalize_general_and_western(std::u32string s) {
  rules::replace_all(s, U"\n-", U"");
  rules::replace_all(s, U"\n", U" ");
  rules::replace_all(s, U"&quot;", U"\"");
  rules::replace_all(s, U"&amp;", U"&");
  rules::replace_all(s, U"&lt;", U"<");
  rules::replace_all(s, U"&gt;", U">");
  s = rules::space_around(U" " + s + U" ", rules::is_mteval_symbol);
  rules::replace_all(s, U"'s ", U" 's ");
  if (s.size() >= 2 && s.compare(s.size() - 2, 2, U"'s") == 0) s = s.substr(0, s.size() - 2) + U" 's";
  return rules::periods_commas_and_dashes(s);
}

std::u32string normalize_asian(std::u32string_view s) {
  // The hiragana, katakana and Katakana-extension rules of Tercom can only match a string that
  // starts with one of them; after the general normalisation the string starts with a space.
  return rules::space_around(s, [](char32_t c) {
    return in(c, {{0x4E00, 0x9FFF}, {0x3400, 0x4DBF}, {0x31C0, 0x31EF}, {0x2E80, 0x2EFF}, {0x3300, 0x33FF},
                  {0xF900, 0xFAFF}, {0xFE30, 0xFE4F}, {0x3200, 0x3F22}}) ||
           is_asian_punct(c) || is_full_width_punct(c);
  });
}

class Ter : public Scorer {
 public:
  explicit Ter(const ScoringOptions& o)
      : Scorer(2), normalized_(o.ter_normalized), no_punct_(o.ter_no_punct), asian_(o.ter_asian_support),
        case_sensitive_(o.ter_case_sensitive) {}

  std::vector<std::vector<double>> systems_statistics(const std::vector<std::string_view>& hypotheses,
                                                      const std::vector<std::string_view>& references) const override {
    // sacreBLEU tokenizes a reference twice (Metric._cache_references, then TER's
    // _extract_reference_info), and Tercom's normalisation is not idempotent: ",.5" becomes
    // ", .5" and then ", . 5". The package's numbers come from the twice-tokenized reference.
    std::vector<Words> refs;
    for (std::string_view reference : references) refs.push_back(split(tokenized(tokenized(reference))));
    std::vector<std::vector<double>> out;
    out.reserve(hypotheses.size());
    for (std::string_view hypothesis : hypotheses) {
      const Words hyp = words(hypothesis);
      int64_t best = kInfinity;
      double ref_lengths = 0;
      for (const Words& ref : refs) {
        const auto [edits, length] = translation_edit_rate(hyp, ref);
        ref_lengths += static_cast<double>(length);
        best = std::min(best, edits);
      }
      out.push_back({static_cast<double>(best), ref_lengths / static_cast<double>(references.size())});
    }
    return out;
  }

  Score score_from(const std::vector<double>& stats) const override {
    const double edits = stats[0], ref_length = stats[1];
    double score = ref_length > 0 ? edits / ref_length : edits > 0 ? 1.0 : 0.0;
    return {"TER", 100 * score, ""};
  }

 protected:
  std::string signature_fields() const override {
    return fmt::format("case:{}|tok:tercom|norm:{}|punct:{}|asian:{}", case_sensitive_ ? "mixed" : "lc",
                       normalized_ ? "yes" : "no", no_punct_ ? "no" : "yes", asian_ ? "yes" : "no");
  }

 private:
  Words words(std::string_view line) const { return split(tokenized(line)); }

  static Words split(const std::string& text) {
    const std::u32string s = unicode::decode(text);
    Words out;
    for (auto w : unicode::split(s)) out.emplace_back(w);
    return out;
  }

  // TercomTokenizer of the rstripped line (its words joined by single spaces).
  std::string tokenized(std::string_view line) const {
    std::u32string s(unicode::rstrip(std::u32string_view(unicode::decode(line))));
    if (!s.empty()) {
      if (!case_sensitive_) s = unicode::lower(s);
      if (normalized_) {
        s = normalize_general_and_western(std::move(s));
        if (asian_) s = normalize_asian(s);
      }
      if (no_punct_) {
        std::u32string kept;
        for (char32_t c : s) {
          const bool punct = c == U'.' || c == U',' || c == U'?' || c == U':' || c == U';' || c == U'!' ||
                             c == U'"' || c == U'(' || c == U')';
          if (!punct && !(asian_ && (is_asian_punct(c) || is_full_width_punct(c)))) kept += c;
        }
        s = std::move(kept);
      }
    }
    return unicode::encode(unicode::normalize_spaces(s));
  }

  bool normalized_, no_punct_, asian_, case_sensitive_;
};

}  // namespace

std::unique_ptr<Scorer> make_ter(const ScoringOptions& options) { return std::make_unique<Ter>(options); }

}  // namespace fairseq_cpp::scoring

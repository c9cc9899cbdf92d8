#include "fairseq_cpp/data/binarizer.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "fairseq_cpp/data/text.h"

namespace fairseq_cpp::data {

void parallel_chunks(size_t n, int workers, const std::function<void(size_t, size_t, int)>& fn) {
  auto chunks = static_cast<size_t>(std::max(1, workers));
  chunks = std::max<size_t>(1, std::min(chunks, n));
  std::vector<std::thread> threads;
  std::exception_ptr error;
  std::mutex mutex;
  auto run = [&](size_t c) {
    try {
      fn(n * c / chunks, n * (c + 1) / chunks, static_cast<int>(c));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
    }
  };
  for (size_t c = 1; c < chunks; ++c) threads.emplace_back(run, c);
  run(0);
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

namespace {

// Words (views into the text) -> a value, by open addressing. Every token of the corpus is looked
// up here: std::unordered_map's byte-wise hash and node walks were a third of binarizing.
template <typename V>
class WordTable {
 public:
  WordTable() : slots_(1024) {}

  const V* find(std::string_view word) const {
    const uint64_t h = hash(word);
    for (size_t k = h & mask();; k = (k + 1) & mask()) {
      const Slot& s = slots_[k];
      if (!s.used) return nullptr;
      if (s.hash == h && s.word == word) return &s.value;
    }
  }
  // The value of `word`, inserted as V{} when absent (the view must outlive the table).
  V& operator[](std::string_view word) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    const uint64_t h = hash(word);
    for (size_t k = h & mask();; k = (k + 1) & mask()) {
      Slot& s = slots_[k];
      if (!s.used) {
        s = Slot{h, word, V{}, true};
        ++size_;
        return s.value;
      }
      if (s.hash == h && s.word == word) return s.value;
    }
  }
  template <typename F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.used) f(s.word, s.value);
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    std::string_view word;
    V value{};
    bool used = false;
  };

  // Eight bytes at a time, mixed by multiplication (the words are short: pieces, subwords).
  static uint64_t hash(std::string_view word) {
    const char* p = word.data();
    size_t n = word.size();
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    while (n >= 8) {
      uint64_t v;
      std::memcpy(&v, p, 8);
      h = (h ^ v) * 0xBF58476D1CE4E5B9ULL;
      h ^= h >> 31;
      p += 8;
      n -= 8;
    }
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[k])) << (8 * k);
    h = (h ^ v) * 0x94D049BB133111EBULL;
    return h ^ (h >> 29);
  }
  size_t mask() const { return slots_.size() - 1; }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Slot& s : old) {
      if (!s.used) continue;
      size_t k = s.hash & mask();
      while (slots_[k].used) k = (k + 1) & mask();
      slots_[k] = s;
    }
  }

  std::vector<Slot> slots_;  // a power of two, at most half full
  size_t size_ = 0;
};

}  // namespace

void count_tokens(const std::vector<std::string_view>& lines, Dictionary& dict, int workers) {
  std::vector<WordTable<int64_t>> counts(static_cast<size_t>(std::max(1, workers)));
  parallel_chunks(lines.size(), workers, [&](size_t begin, size_t end, int chunk) {
    WordTable<int64_t>& mine = counts[static_cast<size_t>(chunk)];
    for (size_t i = begin; i < end; ++i) for_each_token(lines[i], [&](std::string_view t) { ++mine[t]; });
  });
  // Merged in sorted order, as fairseq's merge_result (finalize sorts again anyway).
  std::vector<std::pair<std::string_view, int64_t>> all;
  for (const auto& c : counts) c.for_each([&](std::string_view word, int64_t n) { all.emplace_back(word, n); });
  std::sort(all.begin(), all.end());
  for (size_t k = 0; k < all.size();) {
    int64_t n = 0;
    size_t next = k;
    for (; next < all.size() && all[next].first == all[k].first; ++next) n += all[next].second;
    dict.add_symbol(all[k].first, n);
    k = next;
  }
  dict.add_symbol("</s>", static_cast<int64_t>(lines.size()));
}

namespace {

// One chunk of lines in `T`: each token's id (unk when absent from `ids`), then </s>.
template <typename T>
void binarize_chunk(const std::vector<std::string_view>& lines, size_t begin, size_t end, const WordTable<int32_t>& ids,
                    const Dictionary& dict, std::vector<T>& values, Binarized& part) {
  // A line of b bytes holds at most (b + 1) / 2 tokens (each one byte or more, spaces between).
  size_t bound = 0;
  for (size_t i = begin; i < end; ++i) bound += (lines[i].size() + 1) / 2 + 1;
  values.reserve(bound);
  part.sizes.reserve(end - begin);
  const std::string& unk_word = Dictionary::unk_word();
  const int32_t unk = dict.unk();
  std::unordered_map<std::string_view, int64_t> replaced;
  for (size_t i = begin; i < end; ++i) {
    const size_t first = values.size();
    for_each_token(lines[i], [&](std::string_view t) {
      const int32_t* id = ids.find(t);
      if (id == nullptr || *id == unk) {
        if (t != unk_word) ++replaced[t];
        values.push_back(static_cast<T>(unk));
      } else {
        values.push_back(static_cast<T>(*id));
      }
    });
    values.push_back(static_cast<T>(dict.eos()));
    const auto n = static_cast<int32_t>(values.size() - first);
    part.sizes.push_back(n);
    part.ntok += n;
  }
  for (auto& [word, n] : replaced) {
    part.replaced[std::string(word)] += n;
    part.nunk += n;
  }
}

// Binarizes `lines` in `workers` chunks and joins the chunks into `out`.
template <typename T>
void binarize_all(const std::vector<std::string_view>& lines, const WordTable<int32_t>& ids, const Dictionary& dict,
                  int workers, Binarized& out) {
  std::vector<std::vector<T>> values(static_cast<size_t>(std::max(1, workers)));
  std::vector<Binarized> parts(values.size());
  parallel_chunks(lines.size(), workers, [&](size_t begin, size_t end, int chunk) {
    const auto c = static_cast<size_t>(chunk);
    binarize_chunk<T>(lines, begin, end, ids, dict, values[c], parts[c]);
  });
  size_t elements = 0, sentences = 0;
  for (size_t c = 0; c < parts.size(); ++c) {
    elements += values[c].size();
    sentences += parts[c].sizes.size();
  }
  out.data.reserve(elements * sizeof(T));
  out.sizes.reserve(sentences);
  for (size_t c = 0; c < parts.size(); ++c) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(values[c].data());
    out.data.insert(out.data.end(), bytes, bytes + values[c].size() * sizeof(T));
    values[c] = {};
    const Binarized& part = parts[c];
    out.sizes.insert(out.sizes.end(), part.sizes.begin(), part.sizes.end());
    out.ntok += part.ntok;
    out.nunk += part.nunk;
    for (const auto& [word, n] : part.replaced) out.replaced[word] += n;
  }
}

}  // namespace

Binarized binarize(const std::vector<std::string_view>& lines, const Dictionary& dict, DType dtype, int workers) {
  // Every symbol's id as dict.index gives it (a symbol listed twice maps where the dictionary says).
  WordTable<int32_t> ids;
  for (int64_t k = 0; k < dict.size(); ++k) ids[dict.symbol(k)] = dict.index(dict.symbol(k));
  Binarized out;
  out.dtype = dtype;
  switch (dtype) {
    case DType::uint8:
      binarize_all<uint8_t>(lines, ids, dict, workers, out);
      break;
    case DType::int8:
      binarize_all<int8_t>(lines, ids, dict, workers, out);
      break;
    case DType::int16:
      binarize_all<int16_t>(lines, ids, dict, workers, out);
      break;
    case DType::int32:
      binarize_all<int32_t>(lines, ids, dict, workers, out);
      break;
    case DType::int64:
      binarize_all<int64_t>(lines, ids, dict, workers, out);
      break;
    case DType::float64:
    case DType::double_:
      binarize_all<double>(lines, ids, dict, workers, out);
      break;
    case DType::uint16:
      binarize_all<uint16_t>(lines, ids, dict, workers, out);
      break;
    case DType::uint32:
      binarize_all<uint32_t>(lines, ids, dict, workers, out);
      break;
    case DType::uint64:
      binarize_all<uint64_t>(lines, ids, dict, workers, out);
      break;
  }
  return out;
}

}  // namespace fairseq_cpp::data

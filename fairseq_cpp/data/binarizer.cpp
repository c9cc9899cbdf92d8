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

void count_tokens(const std::vector<std::string_view>& lines, Dictionary& dict, int workers) {
  using Counts = std::unordered_map<std::string_view, int64_t>;
  std::vector<Counts> counts(static_cast<size_t>(std::max(1, workers)));
  parallel_chunks(lines.size(), workers, [&](size_t begin, size_t end, int chunk) {
    Counts& mine = counts[static_cast<size_t>(chunk)];
    std::vector<std::string_view> tokens;
    for (size_t i = begin; i < end; ++i) {
      tokens.clear();
      tokenize_line(lines[i], tokens);
      for (auto t : tokens) ++mine[t];
    }
  });
  // Merged in sorted order, as fairseq's merge_result (finalize sorts again anyway).
  Counts total;
  for (auto& c : counts)
    for (auto& [word, n] : c) total[word] += n;
  std::vector<std::pair<std::string_view, int64_t>> sorted(total.begin(), total.end());
  std::sort(sorted.begin(), sorted.end());
  for (auto& [word, n] : sorted) dict.add_symbol(word, n);
  dict.add_symbol("</s>", static_cast<int64_t>(lines.size()));
}

namespace {

template <typename T>
void append_ids(const std::vector<int32_t>& ids, std::vector<uint8_t>& out) {
  size_t at = out.size();
  out.resize(at + ids.size() * sizeof(T));
  for (size_t k = 0; k < ids.size(); ++k) {
    T v = static_cast<T>(ids[k]);
    std::memcpy(out.data() + at + k * sizeof(T), &v, sizeof(T));
  }
}

void append_any(DType dtype, const std::vector<int32_t>& ids, std::vector<uint8_t>& out) {
  switch (dtype) {
    case DType::uint8:
      return append_ids<uint8_t>(ids, out);
    case DType::int8:
      return append_ids<int8_t>(ids, out);
    case DType::int16:
      return append_ids<int16_t>(ids, out);
    case DType::int32:
      return append_ids<int32_t>(ids, out);
    case DType::int64:
      return append_ids<int64_t>(ids, out);
    case DType::float64:
    case DType::double_:
      return append_ids<double>(ids, out);
    case DType::uint16:
      return append_ids<uint16_t>(ids, out);
    case DType::uint32:
      return append_ids<uint32_t>(ids, out);
    case DType::uint64:
      return append_ids<uint64_t>(ids, out);
  }
}

}  // namespace

Binarized binarize(const std::vector<std::string_view>& lines, const Dictionary& dict, DType dtype, int workers) {
  std::vector<Binarized> parts(static_cast<size_t>(std::max(1, workers)));
  const std::string& unk_word = Dictionary::unk_word();
  parallel_chunks(lines.size(), workers, [&](size_t begin, size_t end, int chunk) {
    Binarized& part = parts[static_cast<size_t>(chunk)];
    part.sizes.reserve(end - begin);
    std::vector<std::string_view> tokens;
    std::vector<int32_t> ids;
    std::unordered_map<std::string_view, int64_t> replaced;
    for (size_t i = begin; i < end; ++i) {
      tokens.clear();
      ids.clear();
      tokenize_line(lines[i], tokens);
      for (auto t : tokens) {
        int32_t id = dict.index(t);
        if (id == dict.unk() && t != unk_word) ++replaced[t];
        ids.push_back(id);
      }
      ids.push_back(dict.eos());
      append_any(dtype, ids, part.data);
      part.sizes.push_back(static_cast<int32_t>(ids.size()));
      part.ntok += static_cast<int64_t>(ids.size());
    }
    for (auto& [word, n] : replaced) {
      part.replaced[std::string(word)] += n;
      part.nunk += n;
    }
  });
  Binarized out;
  out.dtype = dtype;
  for (auto& part : parts) {
    out.data.insert(out.data.end(), part.data.begin(), part.data.end());
    out.sizes.insert(out.sizes.end(), part.sizes.begin(), part.sizes.end());
    out.ntok += part.ntok;
    out.nunk += part.nunk;
    for (auto& [word, n] : part.replaced) out.replaced[word] += n;
  }
  return out;
}

}  // namespace fairseq_cpp::data

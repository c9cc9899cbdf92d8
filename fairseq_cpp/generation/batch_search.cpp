#include "fairseq_cpp/generation/batch_search.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include <ATen/Parallel.h>
#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/core/torch.h"

namespace fairseq_cpp::generation {
namespace {

// One intra-op thread and one BLAS thread per caller while alive; restores both counts. Relies on
// LibTorch's OpenMP backend (Debian's: a new thread takes the stored count at its first parallel
// region) and on a thread-safe BLAS (Debian's pthread OpenBLAS runs a one-thread GEMM on the
// calling thread). Not for concurrent search_batches calls: the counts are process-wide.
class SingleThreadedKernels {
 public:
  SingleThreadedKernels() : aten_threads_(at::get_num_threads()), blas_threads_(core::set_blas_threads(1)) {
    at::set_num_threads(1);
  }
  ~SingleThreadedKernels() {
    at::set_num_threads(aten_threads_);
    core::set_blas_threads(blas_threads_);  // a no-op where the BLAS has no count of its own
  }
  SingleThreadedKernels(const SingleThreadedKernels&) = delete;
  SingleThreadedKernels& operator=(const SingleThreadedKernels&) = delete;

 private:
  int aten_threads_;
  int blas_threads_;
};

// Rows part, part + parts, part + 2 * parts, ... of batch `batch`.
struct Part {
  size_t batch;
  size_t index;
  int64_t parts;
};

std::vector<int64_t> part_rows(const Part& part, int64_t batch_rows) {
  std::vector<int64_t> rows;
  for (auto r = static_cast<int64_t>(part.index); r < batch_rows; r += part.parts) rows.push_back(r);
  return rows;
}

Hypotheses search_part(const SequenceGenerator& generator, models::EncoderDecoderModel& model,
                       const SearchBatch& batch, const Part& part) {
  if (part.parts == 1)
    return generator.generate(model, batch.src_tokens, batch.src_lengths, batch.prefix_tokens, batch.constraints);
  const std::vector<int64_t> picked = part_rows(part, batch.src_tokens.size(0));
  at::Tensor rows = torch::tensor(picked, torch::kInt64);
  std::vector<Constraints> constraints;
  if (!batch.constraints.empty())
    for (int64_t r : picked) constraints.push_back(batch.constraints[static_cast<size_t>(r)]);
  // The part keeps the batch's width, so max_len_a * width is the batch's limit.
  return generator.generate(
      model, batch.src_tokens.index_select(0, rows), batch.src_lengths.index_select(0, rows),
      batch.prefix_tokens.defined() ? batch.prefix_tokens.index_select(0, rows) : batch.prefix_tokens, constraints);
}

// The workers' shared state: a queue of parts, their results, the first error.
class PartQueue {
 public:
  PartQueue(std::vector<Part> parts, size_t batches) : parts_(std::move(parts)), results_(batches), left_(batches) {
    for (const Part& p : parts_) {
      results_[p.batch].resize(static_cast<size_t>(p.parts));
      left_[p.batch] = static_cast<size_t>(p.parts);
    }
  }

  // Worker loop: searches parts until none is left or the queue stops.
  void work(const SequenceGenerator& generator, models::EncoderDecoderModel& model,
            const std::vector<SearchBatch>& batches) {
    for (;;) {
      size_t next;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopped_ || next_ == parts_.size()) return;
        next = next_++;
      }
      const Part& part = parts_[next];
      try {
        Hypotheses found = search_part(generator, model, batches[part.batch], part);
        std::lock_guard<std::mutex> lock(mutex_);
        results_[part.batch][part.index] = std::move(found);
        --left_[part.batch];
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
        stopped_ = true;
      }
      changed_.notify_all();
    }
  }

  // Waits for batch `i`'s parts and returns its hypotheses in the batch's row order; rethrows a
  // worker's error if the batch cannot be completed.
  Hypotheses take(size_t i, int64_t batch_rows) {
    std::vector<Hypotheses> parts;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return left_[i] == 0 || error_; });
      if (left_[i] != 0) std::rethrow_exception(error_);
      parts = std::move(results_[i]);
    }
    Hypotheses merged(static_cast<size_t>(batch_rows));
    const auto n = static_cast<int64_t>(parts.size());
    for (int64_t p = 0; p < n; ++p) {
      auto& found = parts[static_cast<size_t>(p)];
      for (size_t q = 0; q < found.size(); ++q) merged[static_cast<size_t>(p + static_cast<int64_t>(q) * n)] = std::move(found[q]);
    }
    return merged;
  }

  void stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Part> parts_;
  size_t next_ = 0;
  bool stopped_ = false;
  std::exception_ptr error_;
  std::vector<std::vector<Hypotheses>> results_;  // per batch, per part
  std::vector<size_t> left_;                      // per batch: parts not yet searched
};

// Stops the queue and joins the workers when the caller leaves, normally or by an exception.
class Workers {
 public:
  explicit Workers(PartQueue& queue) : queue_(queue) {}
  ~Workers() {
    queue_.stop();
    for (auto& t : threads_) t.join();
  }
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;
  template <typename F>
  void start(F&& body) {
    threads_.emplace_back(std::forward<F>(body));
  }

 private:
  PartQueue& queue_;
  std::vector<std::thread> threads_;
};

}  // namespace

void search_batches(const SequenceGenerator& generator, models::EncoderDecoderModel& model,
                    const std::vector<SearchBatch>& batches, int workers,
                    const std::function<void(size_t, Hypotheses&&)>& done) {
  if (batches.empty()) return;
  // The next batch's caches are usually larger (fairseq's order: shortest sources first), so the
  // pages this batch's search freed go back to the system rather than wait for a request they fit.
  auto finished = [&](size_t i, Hypotheses&& hypotheses) {
    done(i, std::move(hypotheses));
    core::release_free_memory();
  };
  // before any worker starts: generate() then only reads the mode
  model.train(generator.options().retain_dropout);
  std::vector<Part> parts;
  for (size_t i = 0; i < batches.size(); ++i) {
    const int64_t rows = batches[i].src_tokens.size(0);
    // Sampling draws its random stream per batch; match_source_len's longest output is the batch's.
    const bool whole = generator.options().sampling || generator.options().match_source_len;
    const int64_t n = whole ? 1 : std::max<int64_t>(1, std::min<int64_t>(workers, rows));
    for (int64_t p = 0; p < n; ++p) parts.push_back({i, static_cast<size_t>(p), n});
  }
  // Too few parts to keep every worker busy (one sentence at a time in fairseq-cpp-interactive),
  // one worker, or a GPU: the batches one by one, each on all intra-op threads.
  if (workers <= 1 || parts.size() < static_cast<size_t>(workers) || !batches.front().src_tokens.device().is_cpu()) {
    for (size_t i = 0; i < batches.size(); ++i) {
      const SearchBatch& b = batches[i];
      finished(i, generator.generate(model, b.src_tokens, b.src_lengths, b.prefix_tokens, b.constraints));
    }
    return;
  }
  PartQueue queue(std::move(parts), batches.size());
  SingleThreadedKernels single_threaded;
  {
    Workers pool(queue);
    for (int w = 0; w < workers; ++w) pool.start([&] { queue.work(generator, model, batches); });
    for (size_t i = 0; i < batches.size(); ++i) finished(i, queue.take(i, batches[i].src_tokens.size(0)));
  }
}

}  // namespace fairseq_cpp::generation

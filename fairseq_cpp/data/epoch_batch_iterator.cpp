#include "fairseq_cpp/data/epoch_batch_iterator.h"

#include <algorithm>
#include <numeric>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::data {

EpochIterator::EpochIterator(std::vector<std::vector<int64_t>> batches, BatchLoader loader, int64_t num_workers,
                             int64_t buffer_size, int64_t start_count, int64_t global_start, int64_t num_shards,
                             int64_t epoch_batches)
    : batches_(std::move(batches)),
      loader_(std::move(loader)),
      start_count_(start_count),
      global_start_(global_start),
      num_shards_(num_shards),
      epoch_batches_(epoch_batches),
      buffer_size_(std::max<int64_t>(1, buffer_size)) {
  for (int64_t w = 0; w < num_workers && w < static_cast<int64_t>(batches_.size()); ++w)
    threads_.emplace_back([this] { worker(); });
}

EpochIterator::~EpochIterator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  consumed_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void EpochIterator::worker() {
  const auto total = static_cast<int64_t>(batches_.size());
  while (true) {
    int64_t k;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      consumed_cv_.wait(lock, [&] { return stop_ || next_claim_ >= total || next_claim_ < consumed_ + buffer_size_; });
      if (stop_ || next_claim_ >= total) return;
      k = next_claim_++;
    }
    Batch batch;
    std::exception_ptr error;
    try {
      const auto& ids = batches_[static_cast<size_t>(k)];
      if (!ids.empty()) batch = loader_(ids);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error) {
        failed_[k] = error;
      } else {
        ready_[k] = std::move(batch);
      }
    }
    produced_.notify_all();
  }
}

std::optional<Batch> EpochIterator::next() {
  if (!has_next()) return std::nullopt;
  const int64_t k = consumed_;
  if (threads_.empty()) {
    ++consumed_;
    const auto& ids = batches_[static_cast<size_t>(k)];
    return ids.empty() ? Batch{} : loader_(ids);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  produced_.wait(lock, [&] { return ready_.count(k) > 0 || failed_.count(k) > 0; });
  ++consumed_;
  consumed_cv_.notify_all();
  if (auto it = failed_.find(k); it != failed_.end()) std::rethrow_exception(it->second);
  auto it = ready_.find(k);
  Batch batch = std::move(it->second);
  ready_.erase(it);
  return batch;
}

std::vector<Batch> EpochIterator::next_group(int64_t n) {
  std::vector<Batch> group;
  for (int64_t i = 0; i < n; ++i) {
    auto batch = next();
    if (!batch) break;
    group.push_back(std::move(*batch));
  }
  return group;
}

int64_t EpochIterator::global_batches() const {
  return std::min(epoch_batches_, global_start_ + consumed_ * num_shards_);
}

EpochBatchIterator::EpochBatchIterator(std::vector<std::vector<int64_t>> batches, BatchLoader loader,
                                       EpochBatchIteratorOptions options)
    : EpochBatchIterator(1, nullptr, options) {
  batches_ = std::move(batches);
  loader_ = std::move(loader);
  loaded_shard_ = 0;
}

EpochBatchIterator::EpochBatchIterator(int64_t data_shards, DataShardLoader load_data_shard,
                                       EpochBatchIteratorOptions options)
    : data_shards_(data_shards), load_data_shard_(std::move(load_data_shard)), options_(options) {
  if (options_.num_shards < 1) raise<UserError>("num_shards must be at least 1, but is {}", options_.num_shards);
  if (options_.shard_id < 0 || options_.shard_id >= options_.num_shards) {
    raise<UserError>("shard_id must be in [0, {}), but is {}", options_.num_shards, options_.shard_id);
  }
  if (data_shards_ < 1) raise<UserError>("data_shards must be at least 1, but is {}", data_shards_);
}

void EpochBatchIterator::load_data_of(int64_t epoch) {
  const int64_t shard = data_shard_of_epoch(epoch, data_shards_);
  if (shard == loaded_shard_) return;
  // The previous directory's batches go first: one data set in memory at a time (an epoch
  // iterator still running keeps its own batches and loader).
  batches_.clear();
  batches_.shrink_to_fit();
  loader_ = nullptr;
  loaded_shard_ = -1;
  EpochData data = load_data_shard_(shard);
  batches_ = std::move(data.batches);
  loader_ = std::move(data.loader);
  loaded_shard_ = shard;
}

int64_t EpochBatchIterator::size() const {
  auto n = static_cast<int64_t>(batches_.size());
  return (n + options_.num_shards - 1) / options_.num_shards;
}

std::vector<int64_t> EpochBatchIterator::epoch_order(int64_t epoch, bool shuffle) const {
  // The batches' positions shuffled as fairseq shuffles the batch list itself (the same swaps).
  std::vector<int64_t> order(batches_.size());
  std::iota(order.begin(), order.end(), 0);
  if (shuffle) NumpyRandom(static_cast<uint32_t>(options_.seed + epoch)).shuffle(order);
  return order;
}

std::vector<std::vector<int64_t>> EpochBatchIterator::epoch_batches(int64_t epoch, bool shuffle) {
  load_data_of(epoch);
  std::vector<std::vector<int64_t>> batches;
  batches.reserve(batches_.size());
  for (int64_t k : epoch_order(epoch, shuffle)) batches.push_back(batches_[static_cast<size_t>(k)]);
  return batches;
}

std::unique_ptr<EpochIterator> EpochBatchIterator::make_iterator(int64_t epoch, bool shuffle, int64_t global_offset) {
  load_data_of(epoch);
  const auto total = static_cast<int64_t>(batches_.size());
  if (global_offset > 0 && global_offset >= total) return nullptr;
  const std::vector<int64_t> order = epoch_order(epoch, shuffle);
  // Round-robin over what is left of the epoch: shard s takes s, s + N, ...; short shards get
  // empty batches at the end so every shard has the same length. Only this shard's are copied.
  const int64_t n = options_.num_shards;
  const int64_t left = total - global_offset;
  const int64_t per_shard = (left + n - 1) / n;
  std::vector<std::vector<int64_t>> mine;
  mine.reserve(static_cast<size_t>(per_shard));
  for (int64_t k = 0; k < per_shard; ++k) {
    int64_t g = global_offset + options_.shard_id + k * n;
    mine.push_back(g < total ? batches_[static_cast<size_t>(order[static_cast<size_t>(g)])] : std::vector<int64_t>{});
  }
  return std::make_unique<EpochIterator>(std::move(mine), loader_, options_.num_workers, options_.buffer_size,
                                         global_offset / n, global_offset, n, total);
}

EpochIterator& EpochBatchIterator::next_epoch_itr(bool shuffle) {
  current_.reset();
  if (pending_) {
    current_ = std::move(pending_);
  } else {
    ++epoch_;
    shuffle_ = shuffle;
    current_ = make_iterator(epoch_, shuffle, 0);
  }
  return *current_;
}

int64_t EpochBatchIterator::iterations_in_epoch() const {
  if (current_) return current_->count();
  if (pending_) return pending_->count();
  return 0;
}

IteratorState EpochBatchIterator::state() const {
  IteratorState s;
  s.epoch = epoch_;
  s.shuffle = shuffle_;
  s.data_shard = data_shard_of_epoch(epoch_, data_shards_);
  s.data_shards = data_shards_;
  if (current_) {
    s.global_batches = current_->global_batches();
  } else if (pending_) {
    s.global_batches = pending_->global_batches();
  }
  return s;
}

IteratorState EpochBatchIterator::next_epoch_state() const {
  IteratorState s;
  s.epoch = epoch_ + 1;
  s.shuffle = shuffle_;
  s.data_shard = data_shard_of_epoch(s.epoch, data_shards_);
  s.data_shards = data_shards_;
  return s;
}

void EpochBatchIterator::load_state(const IteratorState& state) {
  current_.reset();
  pending_.reset();
  epoch_ = state.epoch;
  shuffle_ = state.shuffle;
  if (epoch_ > 0) pending_ = make_iterator(epoch_, shuffle_, state.global_batches);
}

}  // namespace fairseq_cpp::data

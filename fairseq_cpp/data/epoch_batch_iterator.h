#pragma once
// fairseq's EpochBatchIterator: the same batch list every epoch, shuffled with seed + epoch,
// dealt round-robin to `num_shards` workers (short shards padded with empty batches), loaded
// ahead by background threads, and resumable from a cursor that counts global batches, so a
// run can resume with a different number of workers at the same point of the epoch. With sharded
// data (fairseq's `data: bin1:bin2:bin3`) each epoch's batches come from its data directory,
// (epoch - 1) mod N, loaded when the epoch starts.
//
//   EpochBatchIterator itr(batches, [&](const auto& ids) { return ds.collate(ids); }, options);
//   EpochBatchIterator sharded(3, [&](int64_t shard) { return load(paths[shard]); }, options);
//   auto& epoch = itr.next_epoch_itr();
//   while (auto group = epoch.next_group(update_freq); !group.empty()) { ... }
//   IteratorState cursor = itr.state();   // into the checkpoint; later itr.load_state(cursor)

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "fairseq_cpp/data/language_pair_dataset.h"

namespace fairseq_cpp::data {

struct EpochBatchIteratorOptions {
  int64_t seed = 1;          // batch order of epoch e is shuffled with seed + e
  int64_t num_shards = 1;    // workers that share the epoch
  int64_t shard_id = 0;      // this worker (0-based)
  int64_t num_workers = 1;   // loader threads; 0 = load in the consuming thread
  int64_t buffer_size = 10;  // batches loaded ahead at most (>= 1)
};

// The resume cursor kept in checkpoints.
struct IteratorState {
  int64_t epoch = 0;           // current epoch (1-based once started; 0 = not started)
  int64_t global_batches = 0;  // batches of the whole (unsharded) epoch list consumed by all workers
  bool shuffle = true;         // whether the epoch's batches are shuffled
  int64_t data_shard = 0;      // the data directory `epoch` reads (0-based): (epoch - 1) mod data_shards
  int64_t data_shards = 1;     // data directories the epochs rotate over (0 = not recorded: imported)
};

// fairseq's rotation over sharded data: epoch `epoch` (1-based) reads directory (epoch - 1) mod
// `data_shards`.
inline int64_t data_shard_of_epoch(int64_t epoch, int64_t data_shards) {
  return (epoch > 0 ? epoch - 1 : 0) % (data_shards > 0 ? data_shards : 1);
}

using BatchLoader = std::function<Batch(const std::vector<int64_t>&)>;

// One data directory's batches (in order, before an epoch shuffles them) and their loader.
struct EpochData {
  std::vector<std::vector<int64_t>> batches;
  BatchLoader loader;
};
// Loads data directory `data_shard` (0-based).
using DataShardLoader = std::function<EpochData(int64_t data_shard)>;

// One epoch's batches for this shard, in order; loads ahead in background threads.
class EpochIterator {
 public:
  EpochIterator(std::vector<std::vector<int64_t>> batches, BatchLoader loader, int64_t num_workers, int64_t buffer_size,
                int64_t start_count, int64_t global_start, int64_t num_shards, int64_t epoch_batches);
  ~EpochIterator();
  EpochIterator(const EpochIterator&) = delete;
  EpochIterator& operator=(const EpochIterator&) = delete;

  // The next batch (an empty Batch pads a short shard); nullopt at the end of the epoch.
  // A loader's exception is rethrown here.
  std::optional<Batch> next();
  // Up to `n` batches (fairseq's GroupedIterator for update_freq); empty at the end.
  std::vector<Batch> next_group(int64_t n);
  bool has_next() const { return consumed_ < static_cast<int64_t>(batches_.size()); }
  // Batches consumed so far in this epoch on this shard, counting those skipped by a resume.
  int64_t count() const { return start_count_ + consumed_; }
  // Batches this shard yields in the epoch, counting those skipped by a resume.
  int64_t size() const { return start_count_ + static_cast<int64_t>(batches_.size()); }
  // Global batches consumed by all shards (the resume cursor).
  int64_t global_batches() const;

 private:
  void worker();

  std::vector<std::vector<int64_t>> batches_;
  BatchLoader loader_;
  int64_t start_count_;
  int64_t global_start_;
  int64_t num_shards_;
  int64_t epoch_batches_;
  int64_t buffer_size_;
  int64_t consumed_ = 0;

  // Prefetching: workers claim batch numbers in order and fill `ready_`.
  std::mutex mutex_;
  std::condition_variable produced_;
  std::condition_variable consumed_cv_;
  int64_t next_claim_ = 0;
  bool stop_ = false;
  std::map<int64_t, Batch> ready_;
  std::map<int64_t, std::exception_ptr> failed_;
  std::vector<std::thread> threads_;
};

class EpochBatchIterator {
 public:
  // The same batches every epoch.
  EpochBatchIterator(std::vector<std::vector<int64_t>> batches, BatchLoader loader, EpochBatchIteratorOptions options);
  // Epochs rotating over `data_shards` data directories; an epoch on another directory than the
  // previous one loads it (and drops the previous one).
  EpochBatchIterator(int64_t data_shards, DataShardLoader load_data_shard, EpochBatchIteratorOptions options);

  // Batches per epoch on this shard of workers: ceil(batches / num_shards), of the data loaded last.
  int64_t size() const;
  int64_t epoch() const { return epoch_; }
  // The epoch that the next next_epoch_itr() starts or continues (fairseq's next_epoch_idx).
  int64_t next_epoch_idx() const { return pending_ ? epoch_ : epoch_ + 1; }
  // Starts the next epoch (or the resumed one after load_state).
  EpochIterator& next_epoch_itr(bool shuffle = true);
  bool end_of_epoch() const { return !current_ || !current_->has_next(); }
  int64_t iterations_in_epoch() const;
  IteratorState state() const;
  // The cursor at the start of the next epoch (what a checkpoint at the end of an epoch holds).
  IteratorState next_epoch_state() const;
  // Restores a cursor: the next next_epoch_itr() continues exactly after the last batch consumed.
  // The caller checks that the cursor's data_shards is this iterator's.
  void load_state(const IteratorState& state);
  // The batch order of `epoch` before sharding (for tests and inspection).
  std::vector<std::vector<int64_t>> epoch_batches(int64_t epoch, bool shuffle);
  int64_t data_shards() const { return data_shards_; }

 private:
  std::unique_ptr<EpochIterator> make_iterator(int64_t epoch, bool shuffle, int64_t global_offset);
  // Positions in `batches_` of the batches of `epoch`, in the epoch's order.
  std::vector<int64_t> epoch_order(int64_t epoch, bool shuffle) const;
  // Makes the data of `epoch`'s directory the loaded one.
  void load_data_of(int64_t epoch);

  int64_t data_shards_ = 1;
  DataShardLoader load_data_shard_;  // empty: the one data set given at construction
  int64_t loaded_shard_ = -1;        // the directory `batches_` and `loader_` come from
  std::vector<std::vector<int64_t>> batches_;
  BatchLoader loader_;
  EpochBatchIteratorOptions options_;
  int64_t epoch_ = 0;
  bool shuffle_ = true;
  std::unique_ptr<EpochIterator> current_;
  std::unique_ptr<EpochIterator> pending_;  // set by load_state
};

}  // namespace fairseq_cpp::data

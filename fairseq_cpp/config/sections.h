#pragma once
// fairseq's config groups as plain structs: one struct per YAML section, one field per key, with
// fairseq's key names and defaults. describe() binds the fields to their keys (config/schema.h);
// that is the only place a key is declared.
//
// Every key's command-line flag is unique across all sections (`--max-tokens` names exactly one key).
// Where fairseq has the same key in two groups, only one section keeps it (see PreprocessConfig), and
// fairseq's registry names (`_name` of task, criterion, optimizer, lr_scheduler) get fairseq's flags
// `--task`, `--criterion`, `--optimizer`, `--lr-scheduler`; the model's `arch` is `--arch`.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fairseq_cpp/config/schema.h"

namespace fairseq_cpp::config {

// `common`: logging, seeds, threads, precision.
struct CommonConfig {
  bool no_progress_bar = false;        // disable the progress bar (same as log_format=none)
  int64_t log_interval = 100;          // updates between progress lines
  std::string log_format;              // tqdm | simple | json | none; empty = tqdm on a TTY, else simple
  std::string log_file;                // also write the log here; empty = stderr only
  bool log_all_ranks = false;          // every rank logs INFO, not only rank 0
  int64_t seed = 1;                    // random seed for everything
  bool cpu = false;                    // use the CPU even where CUDA is available
  int64_t cpu_threads = 0;             // intra-op threads; 0 = cores of this process / local processes
  bool fp16 = false;                   // mixed precision with float16 and a dynamic loss scaler
  bool bf16 = false;                   // mixed precision with bfloat16
  bool memory_efficient_fp16 = false;  // fp16 without an fp32 copy of the weights
  bool memory_efficient_bf16 = false;  // bf16 without an fp32 copy of the weights
  std::string tensorboard_logdir;      // also write the logged stats as TensorBoard scalars here; empty = off

  // fp16's dynamic loss scaler (fairseq's DynamicLossScaler).
  int64_t fp16_init_scale = 128;               // initial loss scale (fairseq: 2^7)
  std::optional<int64_t> fp16_scale_window;    // updates without overflow before the scale doubles;
                                               // unset = 2^14 / (world size * update_freq[0])
  double fp16_scale_tolerance = 0.0;           // fraction of overflowing updates tolerated before halving
  double min_loss_scale = 1e-4;                // stop training when the loss scale falls below this
  std::optional<double> threshold_loss_scale;  // never lower the loss scale below this; unset = no floor
  // Beyond fairseq: where the loss scale would reach min_loss_scale, run the next
  // fp16_fallback_updates updates in this precision ("bf16" or "fp32") instead of stopping, then go
  // back to fp16 with a fresh scale; empty = stop as fairseq does.
  std::string fp16_fallback;
  int64_t fp16_fallback_updates = 1000;
};
void describe(CommonConfig& c, Section& s);

// `common_eval`: the checkpoint to evaluate and how to print its output (fairseq-generate).
struct CommonEvalConfig {
  std::string path;          // checkpoint file to load; empty = none given
  std::string post_process;  // remove this BPE/segmentation from output ("sentencepiece", "subword_nmt",
                             // or a literal symbol such as "@@ "); empty or "none" = leave as is
  bool quiet = false;        // print only the final scores
  std::string results_path;  // write generations to a file in this directory; empty = stdout
  bool use_ema = false;      // evaluate the checkpoint's EMA weights (extra_state["ema"]) instead of its model
};
void describe(CommonEvalConfig& c, Section& s);

// `distributed_training`: data-parallel training across processes.
struct DistributedTrainingConfig {
  int64_t distributed_world_size = 1;       // processes in all; 0 or 1 = one; > 1 on one node = local spawn
  int64_t distributed_rank = 0;             // rank of this process (0-based)
  std::string distributed_backend;          // gloo | nccl; empty = gloo on CPU, nccl on CUDA
  std::string distributed_init_method;      // rendezvous address, e.g. tcp://host:port; empty = inferred
  int64_t distributed_port = -1;            // rendezvous TCP port; -1 = not set
  int64_t device_id = 0;                    // CUDA device index of this process (fairseq's --local_rank)
  bool distributed_no_spawn = false;        // do not spawn local processes even when world size > 1
  int64_t bucket_cap_mb = 25;               // gradient all-reduce bucket size, in MiB
  double timeout = 1800.0;                  // collective and rendezvous timeout, in seconds
  int64_t check_interval = 100;             // updates between cross-rank parameter checksum checks; 0 = off
  std::string ddp_backend = "pytorch_ddp";  // fairseq's DDP implementation; all average the same gradients here
  // network interface(s) for Gloo, comma-separated; empty = GLOO_SOCKET_IFNAME, else the one that routes to the master
  std::string socket_ifname;
  // on a resume with another number of workers, scale update_freq to keep the run's global batch
  bool keep_global_batch = false;
  std::string zero_sharding =
      "none";  // none | os | os_grad: each worker keeps the optimizer state (and gradient) of 1/N
};
void describe(DistributedTrainingConfig& c, Section& s);

// `dataset`: batching, subsets, validation schedule, data loading.
struct DatasetConfig {
  int64_t num_workers = 1;                           // data loading threads; 0 = load in the training thread
  bool skip_invalid_size_inputs_valid_test = false;  // drop too long/short examples in valid/test sets
  int64_t max_tokens = 0;                            // max tokens in a batch (incl. padding); 0 = no limit
  int64_t batch_size = 0;                            // max sentences in a batch; 0 = no limit
  int64_t required_batch_size_multiple = 8;          // batch sizes are rounded to a multiple of this
  std::string dataset_impl = "mmap";                 // binarized data format: mmap | raw
  int64_t data_buffer_size = 10;                     // batches to prefetch
  std::string train_subset = "train";                // subset to train on
  std::string valid_subset = "valid";                // comma-separated subsets to validate on
  int64_t validate_interval = 1;                     // validate every N epochs
  int64_t validate_interval_updates = 0;             // also validate every N updates; 0 = off
  int64_t validate_after_updates = 0;                // do not validate before this many updates
  bool disable_validation = false;                   // never validate
  int64_t max_tokens_valid = 0;                      // max tokens in a valid batch; 0 = same as max_tokens
  int64_t batch_size_valid = 0;                      // max sentences in a valid batch; 0 = same as batch_size
  int64_t curriculum = 0;                            // do not shuffle batches for the first N epochs
  std::string gen_subset = "test";                   // subset to generate from (fairseq-generate)
  int64_t num_shards = 1;                            // split generation into N shards
  int64_t shard_id = 0;                              // the shard to generate (0-based, < num_shards)
};
void describe(DatasetConfig& c, Section& s);

// `task`: translation task (fairseq/tasks/translation.py).
struct TaskConfig {
  std::string _name = "translation";        // task name; only "translation"
  std::string data;                         // data-bin directory; "bin1:bin2:..." = epoch e trains on bin((e-1) mod N)
  std::string source_lang;                  // source language code; empty = infer from the data file names
  std::string target_lang;                  // target language code; empty = infer from the data file names
  bool left_pad_source = true;              // pad source sentences on the left
  bool left_pad_target = false;             // pad target sentences on the left
  int64_t max_source_positions = 1024;      // max source length, in tokens
  int64_t max_target_positions = 1024;      // max target length, in tokens
  bool truncate_source = false;             // truncate sources to max_source_positions instead of skipping
  int64_t upsample_primary = 1;             // with train1, train2, ...: train is repeated N times
  bool eval_bleu = false;                   // compute BLEU on validation (beam search over the valid set)
  std::string eval_bleu_detok = "space";    // detokenizer before BLEU; "space" = none
  std::string eval_bleu_remove_bpe;         // remove this BPE before BLEU ("@@ ", "sentencepiece"); "" = none
  bool eval_bleu_print_samples = false;     // log sample generations during validation
  bool eval_tokenized_bleu = false;         // BLEU on the text as is (sacrebleu tokenize=none), not 13a
  std::string eval_bleu_args = "{}";        // JSON generation options of the BLEU search, e.g. {"beam": 5}
  std::string eval_bleu_detok_args = "{}";  // JSON options of the detokenizer: {"target_lang": "de"}
};
void describe(TaskConfig& c, Section& s);

// `model`: transformer architecture. `arch` picks a preset (fairseq's register_model_architecture);
// every unset optional below takes the preset's value, a set one overrides it.
struct ModelConfig {
  std::string arch = "transformer";                      // architecture preset
  std::string activation_fn;                             // relu | gelu; empty = preset
  std::optional<double> dropout;                         // dropout probability
  std::optional<double> attention_dropout;               // dropout on attention weights
  std::optional<double> activation_dropout;              // dropout after the FFN activation
  std::optional<int64_t> encoder_embed_dim;              // encoder embedding width
  std::optional<int64_t> encoder_ffn_embed_dim;          // encoder FFN hidden width
  std::optional<int64_t> encoder_layers;                 // number of encoder layers
  std::optional<int64_t> encoder_attention_heads;        // encoder attention heads
  std::optional<bool> encoder_normalize_before;          // pre-norm encoder layers
  std::optional<bool> encoder_learned_pos;               // learned (not sinusoidal) encoder positions
  std::optional<int64_t> decoder_embed_dim;              // decoder embedding width
  std::optional<int64_t> decoder_ffn_embed_dim;          // decoder FFN hidden width
  std::optional<int64_t> decoder_layers;                 // number of decoder layers
  std::optional<int64_t> decoder_attention_heads;        // decoder attention heads
  std::optional<bool> decoder_normalize_before;          // pre-norm decoder layers
  std::optional<bool> decoder_learned_pos;               // learned (not sinusoidal) decoder positions
  std::optional<int64_t> decoder_output_dim;             // decoder output width; unset = embed dim
  std::optional<bool> share_decoder_input_output_embed;  // tie decoder input and output embeddings
  std::optional<bool> share_all_embeddings;              // one embedding for encoder, decoder and output
  std::optional<bool> no_scale_embedding;                // do not scale embeddings by sqrt(dim)
  std::optional<bool> layernorm_embedding;               // layer norm after the embeddings
  std::optional<bool> no_token_positional_embeddings;    // no positional embeddings at all
  bool checkpoint_activations = false;                   // recompute each layer's forward in backward
};
void describe(ModelConfig& c, Section& s);

// `criterion`: training loss. (sentence_avg is in `optimization`, as in fairseq.)
struct CriterionConfig {
  std::string _name = "cross_entropy";  // cross_entropy | label_smoothed_cross_entropy
  double label_smoothing = 0.0;         // label smoothing epsilon; 0 = none
  bool report_accuracy = false;         // also log token accuracy
  int64_t ignore_prefix_size = 0;       // ignore the first N target tokens in the loss
};
void describe(CriterionConfig& c, Section& s);

// `optimizer`: one struct for adam, sgd and nag; each uses its own keys.
struct OptimizerConfig {
  std::string _name = "adam";                  // adam | sgd | nag
  std::vector<double> adam_betas{0.9, 0.999};  // Adam beta1, beta2 (fairseq's "(0.9, 0.999)" also accepted)
  double adam_eps = 1e-8;                      // Adam epsilon
  double weight_decay = 0.0;                   // L2 weight decay; 0 = none
  double momentum = 0.0;                       // sgd/nag momentum (fairseq's nag defaults to 0.99; here 0)
};
void describe(OptimizerConfig& c, Section& s);

// `lr_scheduler`: one struct for all schedulers; each uses its own keys. The peak learning rate is
// `optimization.lr`.
struct LrSchedulerConfig {
  std::string _name = "fixed";     // fixed | inverse_sqrt | polynomial_decay | cosine | reduce_lr_on_plateau
  std::optional<int64_t> warmup_updates;  // linear warm-up updates; 0 = none (inverse_sqrt needs > 0); unset =
                                          // fairseq's default: 4000 for inverse_sqrt, 0 for the others
  double warmup_init_lr = -1.0;    // warm-up start lr; < 0 = 0 with warm-up, else lr (cosine: min_lr)
  double end_learning_rate = 0.0;  // polynomial_decay: final lr
  double power = 1.0;              // polynomial_decay: decay exponent
  int64_t total_num_update = 0;    // polynomial_decay: updates to decay over; 0 = optimization.max_update
  int64_t force_anneal = 0;        // fixed/polynomial_decay: anneal from this epoch; 0 = never
  double lr_shrink = 0.1;          // fixed/plateau/cosine: factor applied to the lr when annealing
  double lr_threshold = 1e-4;      // reduce_lr_on_plateau: min relative improvement that counts
  int64_t lr_patience = 0;         // reduce_lr_on_plateau: epochs without improvement before shrinking
  double min_lr = 0.0;             // cosine: lowest lr
  double t_mult = 1.0;             // cosine: growth factor of each period's length
  int64_t lr_period_updates = -1;  // cosine: updates in the first period; <= 0 = max_update - warmup_updates
};
void describe(LrSchedulerConfig& c, Section& s);
// fairseq's `warmup_updates` default for scheduler `name`: 4000 for inverse_sqrt, 0 for the others.
int64_t default_warmup_updates(const std::string& name);

// `optimization`: stopping rules, gradient handling, learning rate.
struct OptimizationConfig {
  int64_t max_epoch = 0;                // stop after this epoch; 0 = no limit
  int64_t max_update = 0;               // stop after this update; 0 = no limit
  double stop_time_hours = 0.0;         // stop after this much training time, in hours; 0 = no limit
  double clip_norm = 0.0;               // clip gradients to this global L2 norm; 0 = off
  bool sentence_avg = false;            // normalize the loss by sentences instead of tokens
  std::vector<int64_t> update_freq{1};  // accumulate N_i batches per update in epoch i (last value after)
  std::vector<double> lr{0.25};         // learning rate (fixed: lr for epoch i, last value after)
  double stop_min_lr = -1.0;            // stop when the lr falls to this value; < 0 = never
  int64_t max_nonfinite = 5;            // stop after this many non-finite gradient updates in a row
};
void describe(OptimizationConfig& c, Section& s);

// `checkpoint`: saving, resuming, early stopping. Negative counts mean "off" / "keep all", as in fairseq.
struct CheckpointConfig {
  std::string save_dir = "checkpoints";             // directory for checkpoints
  std::string restore_file = "checkpoint_last.pt";  // resume from this file (the default: in save_dir)
  bool reset_dataloader = false;                    // do not restore the data iterator position
  bool reset_lr_scheduler = false;                  // do not restore the lr scheduler state
  bool reset_meters = false;                        // do not restore the meters
  bool reset_optimizer = false;                     // do not restore the optimizer state
  int64_t save_interval = 1;                        // save every N epochs
  int64_t save_interval_updates = 0;                // also save (and validate) every N updates; 0 = off
  int64_t keep_interval_updates = -1;               // keep the last N update checkpoints; <= 0 = all
  int64_t keep_last_epochs = -1;                    // keep the last N epoch checkpoints; <= 0 = all
  int64_t keep_best_checkpoints = -1;               // keep the best N checkpoints by metric; <= 0 = off
  bool no_save = false;                             // never save checkpoints
  bool no_epoch_checkpoints = false;                // save only checkpoint_last and checkpoint_best
  bool no_last_checkpoints = false;                 // do not save checkpoint_last
  bool no_save_optimizer_state = false;             // leave the optimizer state out of checkpoints
  std::string best_checkpoint_metric = "loss";      // validation metric that picks checkpoint_best
  bool maximize_best_checkpoint_metric = false;     // larger metric values are better
  int64_t patience = -1;                            // stop after N validations without gain; <= 0 = off
  std::string checkpoint_suffix;                    // appended to checkpoint file names
};
void describe(CheckpointConfig& c, Section& s);

// `generation`: beam search and sampling (fairseq-generate, BLEU during validation).
struct GenerationConfig {
  int64_t beam = 5;                  // beam width
  int64_t nbest = 1;                 // hypotheses to output per sentence
  double max_len_a = 0.0;            // max output length = a * source length + b
  int64_t max_len_b = 200;           // max output length = a * source length + b
  int64_t min_len = 1;               // min output length, in tokens
  bool match_source_len = false;     // outputs have exactly the source length (src_lengths, with </s>)
  bool unnormalized = false;         // compare hypotheses by unnormalized scores
  double lenpen = 1.0;               // length penalty: < 1 favours shorter, > 1 longer outputs
  double unkpen = 0.0;               // unknown-word penalty: < 0 more unks, > 0 fewer
  bool sacrebleu = false;            // score with sacrebleu
  bool score_reference = false;      // only score the reference translations
  int64_t prefix_size = 0;           // force the first N target tokens from the reference
  int64_t no_repeat_ngram_size = 0;  // never repeat an n-gram of this size; 0 = off
  bool sampling = false;             // sample instead of beam search
  int64_t sampling_topk = -1;        // sample from the top K words; -1 = all words
  double sampling_topp = -1.0;       // sample from the smallest set with this probability mass; < 0 = off
  double temperature = 1.0;          // softmax temperature
  int64_t diverse_beam_groups = -1;  // diverse beam search with this many groups (a divisor of beam); <= 0 = off
  // diverse beam search's penalty per earlier group's candidate with the same word, at each step
  double diverse_beam_strength = 0.5;
  std::string print_alignment;  // A- lines after P-: hard ("source-target" pairs) | soft (weights); empty = none
  // <unk> in hypotheses becomes the source word it aligns to (kCopySourceWord), or that word's
  // translation in this alignment dictionary file ("source target" lines); empty = off
  std::string replace_unk;
  // linear layers' weights at inference: none (float32) | int8 (per output channel, activations
  // quantized per row at each call; CPU with AVX-512 VNNI or AVX2)
  std::string quantize = "none";
  // keep dropout active at inference (fairseq's --retain-dropout): outputs then vary with the seed
  bool retain_dropout = false;
  // interactive's lexically constrained decoding: ordered | unordered; empty = off
  std::string constraints;
};
// replace_unk's value for `--replace-unk` alone: copy the aligned source word.
inline constexpr const char* kCopySourceWord = "copy";
void describe(GenerationConfig& c, Section& s);

// `preprocess`: fairseq-preprocess (text -> dictionaries and binarized data), plus SentencePiece.
// fairseq-preprocess's --source-lang/--target-lang are task.source_lang/task.target_lang and its
// --dataset-impl is dataset.dataset_impl: a flag names one key, so those are not repeated here.
struct PreprocessConfig {
  std::string trainpref;                   // train file prefix (<prefix>.<lang>); also builds dictionaries
  std::string validpref;                   // comma-separated valid file prefixes; empty = none
  std::string testpref;                    // comma-separated test file prefixes; empty = none
  std::string destdir = "data-bin";        // output directory
  int64_t thresholdtgt = 0;                // target words seen fewer times become <unk>; 0 = keep all
  int64_t thresholdsrc = 0;                // source words seen fewer times become <unk>; 0 = keep all
  std::string tgtdict;                     // reuse this target dictionary; empty = build one
  std::string srcdict;                     // reuse this source dictionary; empty = build one
  int64_t nwordstgt = -1;                  // target dictionary size; -1 = all words
  int64_t nwordssrc = -1;                  // source dictionary size; -1 = all words
  bool joined_dictionary = false;          // one dictionary for both languages
  bool only_source = false;                // process the source language only
  int64_t padding_factor = 8;              // pad dictionary sizes to a multiple of this
  int64_t workers = 1;                     // parallel binarization workers
  bool dict_only = false;                  // build the dictionaries and stop
  std::string spm_model;                   // encode raw text with this SentencePiece model; empty = none
  int64_t spm_vocab_size = 0;              // train a SentencePiece model of this vocab size; 0 = do not
  std::string spm_model_type = "unigram";  // SentencePiece model type: unigram | bpe | char | word
  double spm_character_coverage = 1.0;     // SentencePiece character coverage
  // Train on a sample of this many sentences (of all languages together), drawn with a fixed seed:
  // SentencePiece's memory grows with what it loads. 0 = every sentence.
  int64_t spm_input_sentence_size = 2000000;
};
void describe(PreprocessConfig& c, Section& s);

// `interactive`: fairseq-interactive's input (fairseq's InteractiveConfig) and the SentencePiece
// model that encodes raw text when the data-bin has none (fairseq's --sentencepiece-model).
struct InteractiveConfig {
  int64_t buffer_size = 1;          // sentences read before translating them as a batch
  std::string input = "-";          // file to translate; "-" = standard input
  std::string sentencepiece_model;  // SentencePiece model for raw text; empty = DATA/spm.model
};
void describe(InteractiveConfig& c, Section& s);

// `scoring`: fairseq-score's files and the metrics to compute.
struct ScoringConfig {
  std::vector<std::string> sys;      // hypothesis files (several: a baseline and systems to compare)
  std::vector<std::string> ref;      // reference files, one sentence per line each
  std::string metric = "bleu,chrf";  // comma-separated metrics: bleu, chrf, chrf++, ter
  std::string tokenize = "13a";      // BLEU's tokenizer
  bool lowercase = false;            // BLEU on lowercased text
  std::string smooth_method = "exp";
  std::optional<double> smooth_value;
  int64_t chrf_char_order = 6;
  int64_t chrf_word_order = 0;
  int64_t chrf_beta = 2;
  bool chrf_whitespace = false;
  bool chrf_lowercase = false;
  bool chrf_eps_smoothing = false;
  bool ter_case_sensitive = false;
  bool ter_normalized = false;
  bool ter_no_punct = false;
  bool ter_asian_support = false;
  int64_t width = 2;              // decimals of the scores
  bool confidence = false;        // one system: 95% confidence interval by bootstrap resampling
  int64_t confidence_n = 1000;    // its resamples
  bool paired_bs = false;         // several systems: paired bootstrap resampling against the first
  int64_t paired_bs_n = 1000;     // its resamples
  bool paired_ar = false;         // several systems: paired approximate randomisation against the first
  int64_t paired_ar_n = 10000;    // its trials
  int64_t resample_seed = 12345;  // seed of the resamples and trials (sacreBLEU's SACREBLEU_SEED)
};
void describe(ScoringConfig& c, Section& s);

// `ema`: fairseq's exponential moving average of the weights (EMAConfig), kept in float32 beside
// the model, saved in checkpoints as extra_state["ema"].
struct EmaConfig {
  bool store_ema = false;          // keep the EMA of the weights
  double ema_decay = 0.9999;       // shadow = decay * shadow + (1 - decay) * weights, at each EMA step
  int64_t ema_start_update = 0;    // before this many updates the EMA copies the weights (decay 0)
  std::string ema_seed_model;      // start the EMA from this checkpoint's EMA weights; empty = from the model
  int64_t ema_update_freq = 1;     // one EMA step every this many updates
  bool ema_fp32 = false;           // keep the EMA in float32 (it always is here: the weights are float32)
  bool validate_with_ema = false;  // validation (loss, BLEU, best checkpoint) uses the EMA weights
};
void describe(EmaConfig& c, Section& s);

// `average`: fairseq's scripts/average_checkpoints.py (fairseq-cpp-eval average).
struct AverageConfig {
  std::vector<std::string> inputs;                // checkpoint files, or one directory with the num_* keys
  std::string output;                             // the averaged checkpoint
  int64_t num_epoch_checkpoints = 0;              // the last N checkpointEPOCH.pt of the directory
  int64_t num_update_checkpoints = 0;             // the last N checkpoint_EPOCH_UPDATES.pt of the directory
  int64_t num_best_checkpoints = 0;               // the N best checkpoint.best_METRIC_VALUE.pt of the directory
  std::optional<int64_t> checkpoint_upper_bound;  // no epoch (or update) after this one
};
void describe(AverageConfig& c, Section& s);

// The whole configuration; one member per YAML section, named as the section.
struct Config {
  CommonConfig common;
  CommonEvalConfig common_eval;
  DistributedTrainingConfig distributed_training;
  DatasetConfig dataset;
  TaskConfig task;
  ModelConfig model;
  CriterionConfig criterion;
  OptimizerConfig optimizer;
  LrSchedulerConfig lr_scheduler;
  OptimizationConfig optimization;
  CheckpointConfig checkpoint;
  EmaConfig ema;
  GenerationConfig generation;
  PreprocessConfig preprocess;
  InteractiveConfig interactive;
  ScoringConfig scoring;
  AverageConfig average;
};

// Every section of `cfg`, bound to its members, in the order of Config's members.
std::vector<Section> describe(Config& cfg);

// Rules between keys that no single key's checks can express. Appends one message per broken rule,
// e.g. "`lr_scheduler.warmup_updates` must be greater than 0 for `lr_scheduler._name` inverse_sqrt,
// but is 0 instead."
void check_consistency(const Config& cfg, std::vector<std::string>& errors);

}  // namespace fairseq_cpp::config

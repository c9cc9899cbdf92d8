#include "fairseq_cpp/config/sections.h"

#include <sstream>

namespace fairseq_cpp::config {

void describe(CommonConfig& c, Section& s) {
  s.add("no_progress_bar", &c.no_progress_bar, "disable the progress bar (as log_format=none)");
  s.add("log_interval", &c.log_interval, "log progress every N updates").greater_than(0);
  s.add("log_format", &c.log_format, "progress format; empty = tqdm on a terminal, else simple")
      .one_of({"", "tqdm", "simple", "json", "none"});
  s.add("log_file", &c.log_file, "also write the log to this file (empty = none)");
  s.add("log_all_ranks", &c.log_all_ranks, "every rank logs INFO, not only rank 0");
  s.add("seed", &c.seed, "pseudo random number generator seed").at_least(0);
  s.add("cpu", &c.cpu, "use the CPU even where CUDA is available");
  s.add("cpu_threads", &c.cpu_threads, "intra-op CPU threads (0 = cores of this process / local processes)")
      .at_least(0);
  s.add("fp16", &c.fp16,
        "mixed precision training with float16 and fairseq's dynamic loss scaler (float16 autocast on CUDA; on the "
        "CPU the arithmetic stays float32 and the scaler decides as on a GPU)");
  s.add("bf16", &c.bf16,
        "mixed precision training with bfloat16: autocast forward passes, float32 weights, gradients and optimizer "
        "state");
  s.add("memory_efficient_fp16", &c.memory_efficient_fp16, "fp16 without an fp32 copy of the weights")
      .not_yet("float16 weights without a float32 copy are not implemented yet: common.fp16 keeps float32 weights");
  s.add("memory_efficient_bf16", &c.memory_efficient_bf16, "bf16 without an fp32 copy of the weights")
      .not_yet("bfloat16 weights without a float32 copy are not implemented yet: common.bf16 keeps float32 weights");
  s.add("tensorboard_logdir", &c.tensorboard_logdir,
        "also write the train and valid stats as TensorBoard scalars in DIR/<tag> (empty = off)");
  s.add("fp16_init_scale", &c.fp16_init_scale, "initial fp16 loss scale").greater_than(0);
  s.add("fp16_scale_window", &c.fp16_scale_window,
        "updates without overflow before the loss scale doubles (unset = 2^14/ranks/update_freq)")
      .greater_than(0);
  s.add("fp16_scale_tolerance", &c.fp16_scale_tolerance,
        "fraction of overflowing updates tolerated before lowering the loss scale")
      .in_range(0, 1);
  s.add("min_loss_scale", &c.min_loss_scale, "stop training when the fp16 loss scale falls below this").at_least(0);
  s.add("threshold_loss_scale", &c.threshold_loss_scale, "never lower the fp16 loss scale below this").greater_than(0);
  s.add("fp16_fallback", &c.fp16_fallback,
        "where the fp16 loss scale would reach min_loss_scale, redo that update and run the next "
        "fp16_fallback_updates in this precision, then return to fp16 with a fresh scale (empty = stop, as fairseq)")
      .one_of({"", "bf16", "fp32"});
  s.add("fp16_fallback_updates", &c.fp16_fallback_updates, "updates run in common.fp16_fallback's precision")
      .greater_than(0);
}

void describe(CommonEvalConfig& c, Section& s) {
  s.add("path", &c.path, "checkpoint file to load");
  s.add("post_process", &c.post_process, "remove BPE from output: sentencepiece, subword_nmt or a symbol")
      .alias("remove_bpe")
      .when_bare("subword_nmt");
  s.add("quiet", &c.quiet, "print only the final scores");
  s.add("results_path", &c.results_path, "write generations to a file in this directory (empty = stdout)");
  s.add("use_ema", &c.use_ema,
        "use the checkpoint's EMA weights (saved by training with ema.store_ema) instead of its model weights");
}

void describe(DistributedTrainingConfig& c, Section& s) {
  s.add("distributed_world_size", &c.distributed_world_size,
        "number of processes (0 or 1 = one process; >1 on one node = local spawn)")
      .at_least(0);
  s.add("distributed_rank", &c.distributed_rank, "rank of this process").at_least(0);
  s.add("distributed_backend", &c.distributed_backend, "collective backend (empty = gloo on CPU, nccl on CUDA)")
      .one_of({"", "gloo", "nccl"});
  s.add("distributed_init_method", &c.distributed_init_method,
        "rendezvous address, e.g. tcp://host:port (empty = inferred)");
  s.add("distributed_port", &c.distributed_port, "rendezvous TCP port (-1 = not set)").at_least(-1);
  s.add("device_id", &c.device_id, "CUDA device index of this process")
      .at_least(0)
      .alias("local_rank")
      .also_flag("local_rank");
  s.add("distributed_no_spawn", &c.distributed_no_spawn, "do not spawn local processes");
  s.add("bucket_cap_mb", &c.bucket_cap_mb, "gradient all-reduce bucket size in MiB").greater_than(0);
  s.add("timeout", &c.timeout, "collective and rendezvous timeout in seconds").greater_than(0);
  s.add("check_interval", &c.check_interval, "updates between cross-rank parameter checksum checks (0 = off)")
      .at_least(0);
  s.add("ddp_backend", &c.ddp_backend,
        "fairseq's DistributedDataParallel implementation: c10d / pytorch_ddp all-reduce each gradient bucket "
        "during backward, as soon as it is ready; no_c10d / legacy_ddp after backward (the same sums either way)")
      .one_of({"c10d", "pytorch_ddp", "no_c10d", "legacy_ddp", "fully_sharded", "slowmo"});
  s.add("socket_ifname", &c.socket_ifname,
        "network interface(s) for Gloo, comma-separated (empty = GLOO_SOCKET_IFNAME, else the one that routes to the "
        "master)");
  s.add("keep_global_batch", &c.keep_global_batch,
        "keep the run's global batch when it resumes with another number of workers (an elastic restart on fewer "
        "or more hosts): `optimization.update_freq` is meant for the world size the run started with, and is "
        "scaled by that size / the current one");
  s.add("zero_sharding", &c.zero_sharding,
        "ZeRO: `os` keeps the optimizer's state (adam) of one N-th of the parameters on each of the N workers, each "
        "updates its share and all-gathers the weights (the same update as `none`); `os_grad` also keeps only "
        "that N-th of the reduced gradient (4 + 12/N bytes per parameter; see docs/training.md)")
      .one_of({"none", "os", "os_grad"});
}

void describe(DatasetConfig& c, Section& s) {
  s.add("num_workers", &c.num_workers, "data loading threads (0 = load in the training thread)").at_least(0);
  s.add("skip_invalid_size_inputs_valid_test", &c.skip_invalid_size_inputs_valid_test,
        "skip too long or too short examples in valid and test sets");
  s.add("max_tokens", &c.max_tokens, "maximum tokens in a batch (0 = no limit)").at_least(0);
  s.add("batch_size", &c.batch_size, "maximum sentences in a batch (0 = no limit)").at_least(0).alias("max_sentences");
  s.add("required_batch_size_multiple", &c.required_batch_size_multiple, "round batch sizes to a multiple of this")
      .greater_than(0);
  s.add("dataset_impl", &c.dataset_impl, "binarized dataset format").one_of({"mmap", "raw"});
  s.add("data_buffer_size", &c.data_buffer_size, "number of batches to prefetch").at_least(0);
  s.add("train_subset", &c.train_subset, "data subset to train on");
  s.add("valid_subset", &c.valid_subset, "comma-separated data subsets to validate on");
  s.add("validate_interval", &c.validate_interval, "validate every N epochs").greater_than(0);
  s.add("validate_interval_updates", &c.validate_interval_updates, "also validate every N updates (0 = off)")
      .at_least(0);
  s.add("validate_after_updates", &c.validate_after_updates, "do not validate before this many updates").at_least(0);
  s.add("disable_validation", &c.disable_validation, "never validate");
  s.add("max_tokens_valid", &c.max_tokens_valid, "maximum tokens in a valid batch (0 = max_tokens)").at_least(0);
  s.add("batch_size_valid", &c.batch_size_valid, "maximum sentences in a valid batch (0 = batch_size)")
      .at_least(0)
      .alias("max_sentences_valid");
  s.add("curriculum", &c.curriculum, "do not shuffle batches for the first N epochs").at_least(0);
  s.add("gen_subset", &c.gen_subset, "data subset to generate from");
  s.add("num_shards", &c.num_shards, "split generation into N shards").greater_than(0);
  s.add("shard_id", &c.shard_id, "the shard to generate (0-based, < num_shards)").at_least(0);
}

void describe(TaskConfig& c, Section& s) {
  s.add("_name", &c._name, "task").one_of({"translation"}).with_flag("task");
  s.add("data", &c.data,
        "binarized data directory (fairseq-preprocess --destdir); colon-separated directories are trained on in "
        "turn, one per epoch (validation uses the first)");
  s.add("source_lang", &c.source_lang, "source language (empty = infer from the data files)");
  s.add("target_lang", &c.target_lang, "target language (empty = infer from the data files)");
  s.add("left_pad_source", &c.left_pad_source, "pad the source on the left");
  s.add("left_pad_target", &c.left_pad_target, "pad the target on the left");
  s.add("max_source_positions", &c.max_source_positions, "maximum source length in tokens").greater_than(0);
  s.add("max_target_positions", &c.max_target_positions, "maximum target length in tokens").greater_than(0);
  s.add("truncate_source", &c.truncate_source, "truncate sources to max_source_positions");
  s.add("upsample_primary", &c.upsample_primary, "amount to upsample the primary dataset").at_least(1);
  s.add("eval_bleu", &c.eval_bleu, "compute BLEU during validation");
  s.add("eval_bleu_detok", &c.eval_bleu_detok, "detokenizer to apply before BLEU ('space' = none)")
      .one_of({"space", "moses"});
  s.add("eval_bleu_detok_args", &c.eval_bleu_detok_args,
        "JSON options of the detokenizer, e.g. {\"target_lang\": \"de\"}");
  s.add("eval_bleu_remove_bpe", &c.eval_bleu_remove_bpe,
        "remove this BPE before BLEU: sentencepiece, subword_nmt or a symbol (alone: '@@ '; empty = none)")
      .when_bare("@@ ");
  s.add("eval_bleu_args", &c.eval_bleu_args,
        "JSON generation options of the BLEU search, e.g. {\"beam\": 5, \"max_len_a\": 1.2, \"max_len_b\": 10}");
  s.add("eval_bleu_print_samples", &c.eval_bleu_print_samples, "log sample generations during validation");
  s.add("eval_tokenized_bleu", &c.eval_tokenized_bleu, "compute tokenized BLEU instead of sacrebleu");
}

void describe(ModelConfig& c, Section& s) {
  s.add("arch", &c.arch, "model architecture preset")
      .one_of({"transformer", "transformer_iwslt_de_en", "transformer_wmt_en_de", "transformer_vaswani_wmt_en_de_big",
               "transformer_wmt_en_de_big", "transformer_tiny"})
      .alias("_name")
      .with_flag("arch");
  s.add("activation_fn", &c.activation_fn, "activation function (empty = preset)").one_of({"", "relu", "gelu"});
  s.add("dropout", &c.dropout, "dropout probability").in_range(0, 1);
  s.add("attention_dropout", &c.attention_dropout, "dropout probability for attention weights").in_range(0, 1);
  s.add("activation_dropout", &c.activation_dropout, "dropout probability after the FFN activation")
      .in_range(0, 1)
      .alias("relu_dropout");
  s.add("encoder_embed_dim", &c.encoder_embed_dim, "encoder embedding dimension").greater_than(0);
  s.add("encoder_ffn_embed_dim", &c.encoder_ffn_embed_dim, "encoder FFN hidden dimension").greater_than(0);
  s.add("encoder_layers", &c.encoder_layers, "number of encoder layers").greater_than(0);
  s.add("encoder_attention_heads", &c.encoder_attention_heads, "number of encoder attention heads").greater_than(0);
  s.add("encoder_normalize_before", &c.encoder_normalize_before, "apply layer norm before each encoder block");
  s.add("encoder_learned_pos", &c.encoder_learned_pos, "learned positional embeddings in the encoder");
  s.add("decoder_embed_dim", &c.decoder_embed_dim, "decoder embedding dimension").greater_than(0);
  s.add("decoder_ffn_embed_dim", &c.decoder_ffn_embed_dim, "decoder FFN hidden dimension").greater_than(0);
  s.add("decoder_layers", &c.decoder_layers, "number of decoder layers").greater_than(0);
  s.add("decoder_attention_heads", &c.decoder_attention_heads, "number of decoder attention heads").greater_than(0);
  s.add("decoder_normalize_before", &c.decoder_normalize_before, "apply layer norm before each decoder block");
  s.add("decoder_learned_pos", &c.decoder_learned_pos, "learned positional embeddings in the decoder");
  s.add("decoder_output_dim", &c.decoder_output_dim, "decoder output dimension (unset = decoder_embed_dim)")
      .greater_than(0);
  s.add("share_decoder_input_output_embed", &c.share_decoder_input_output_embed,
        "share decoder input and output embeddings");
  s.add("share_all_embeddings", &c.share_all_embeddings,
        "share encoder, decoder and output embeddings (needs a joined dictionary)");
  s.add("no_scale_embedding", &c.no_scale_embedding, "do not scale embeddings by sqrt(embed_dim)");
  s.add("layernorm_embedding", &c.layernorm_embedding, "add layer norm after the embeddings");
  s.add("no_token_positional_embeddings", &c.no_token_positional_embeddings, "disable positional embeddings");
  s.add("checkpoint_activations", &c.checkpoint_activations,
        "keep only each layer's input during forward and recompute the layer in backward (less memory, one more "
        "forward pass)");
}

void describe(CriterionConfig& c, Section& s) {
  s.add("_name", &c._name, "training criterion")
      .one_of({"cross_entropy", "label_smoothed_cross_entropy"})
      .with_flag("criterion");
  s.add("label_smoothing", &c.label_smoothing, "epsilon for label smoothing (0 = none)").in_range(0, 1);
  s.add("report_accuracy", &c.report_accuracy, "report token accuracy");
  s.add("ignore_prefix_size", &c.ignore_prefix_size, "ignore the first N target tokens in the loss").at_least(0);
}

void describe(OptimizerConfig& c, Section& s) {
  s.add("_name", &c._name, "optimizer").one_of({"adam", "sgd", "nag"}).with_flag("optimizer");
  s.add("adam_betas", &c.adam_betas, "betas for Adam, e.g. (0.9, 0.98)").in_range(0, 1);
  s.add("adam_eps", &c.adam_eps, "epsilon for Adam").at_least(0);
  s.add("weight_decay", &c.weight_decay, "weight decay (0 = none)").at_least(0);
  s.add("momentum", &c.momentum, "momentum factor for sgd and nag").at_least(0);
}

void describe(LrSchedulerConfig& c, Section& s) {
  s.add("_name", &c._name, "learning rate scheduler")
      .one_of({"fixed", "inverse_sqrt", "polynomial_decay", "cosine", "reduce_lr_on_plateau"})
      .with_flag("lr-scheduler");
  s.add("warmup_updates", &c.warmup_updates,
        "warm up the lr linearly for N updates (inverse_sqrt needs > 0; null = fairseq's default: 4000 for "
        "inverse_sqrt, 0 for the others)")
      .at_least(0);
  s.add("warmup_init_lr", &c.warmup_init_lr, "initial lr during warm-up (< 0 = 0, or min_lr for cosine)");
  s.add("end_learning_rate", &c.end_learning_rate, "polynomial_decay: learning rate to decay to").at_least(0);
  s.add("power", &c.power, "polynomial_decay: decay exponent");
  s.add("total_num_update", &c.total_num_update, "polynomial_decay: updates to decay over (0 = max_update)")
      .at_least(0);
  s.add("force_anneal", &c.force_anneal, "force annealing from this epoch (0 = off)").at_least(0);
  s.add("lr_shrink", &c.lr_shrink, "shrink factor for annealing: lr_new = lr * lr_shrink").in_range(0, 1);
  s.add("lr_threshold", &c.lr_threshold, "reduce_lr_on_plateau: minimum improvement that counts").at_least(0);
  s.add("lr_patience", &c.lr_patience, "reduce_lr_on_plateau: epochs without improvement before shrinking").at_least(0);
  s.add("min_lr", &c.min_lr, "cosine: minimum learning rate").at_least(0);
  s.add("t_mult", &c.t_mult, "cosine: factor to grow the length of each period").greater_than(0);
  s.add("lr_period_updates", &c.lr_period_updates,
        "cosine: updates in the first period (<= 0 = max_update - warmup_updates)");
}

int64_t default_warmup_updates(const std::string& name) { return name == "inverse_sqrt" ? 4000 : 0; }

void describe(OptimizationConfig& c, Section& s) {
  s.add("max_epoch", &c.max_epoch, "force stop training at this epoch (0 = no limit)").at_least(0);
  s.add("max_update", &c.max_update, "force stop training at this update (0 = no limit)").at_least(0);
  s.add("stop_time_hours", &c.stop_time_hours, "force stop training after this many hours (0 = no limit)").at_least(0);
  s.add("clip_norm", &c.clip_norm, "clip gradients to this global L2 norm (0 = off)").at_least(0);
  s.add("sentence_avg", &c.sentence_avg, "normalize the loss by sentences, not tokens");
  s.add("update_freq", &c.update_freq, "update parameters every N_i batches in epoch i").greater_than(0);
  s.add("lr", &c.lr, "learning rate (fixed: for epoch i; the last value for later epochs)").at_least(0);
  s.add("stop_min_lr", &c.stop_min_lr, "stop training when the learning rate reaches this (< 0 = never)");
  s.add("max_nonfinite", &c.max_nonfinite, "stop after N non-finite gradient updates in a row").greater_than(0);
}

void describe(CheckpointConfig& c, Section& s) {
  s.add("save_dir", &c.save_dir, "directory to save checkpoints in");
  s.add("restore_file", &c.restore_file, "checkpoint to resume from (default: <save_dir>/checkpoint_last.pt)");
  s.add("reset_dataloader", &c.reset_dataloader, "do not restore the data iterator from the checkpoint");
  s.add("reset_lr_scheduler", &c.reset_lr_scheduler, "do not restore the lr scheduler from the checkpoint");
  s.add("reset_meters", &c.reset_meters, "do not restore the meters from the checkpoint");
  s.add("reset_optimizer", &c.reset_optimizer, "do not restore the optimizer state from the checkpoint");
  s.add("save_interval", &c.save_interval, "save a checkpoint every N epochs").greater_than(0);
  s.add("save_interval_updates", &c.save_interval_updates, "save (and validate) every N updates (0 = off)").at_least(0);
  s.add("keep_interval_updates", &c.keep_interval_updates, "keep the last N update checkpoints (<= 0 = all)")
      .at_least(-1);
  s.add("keep_last_epochs", &c.keep_last_epochs, "keep the last N epoch checkpoints (<= 0 = all)").at_least(-1);
  s.add("keep_best_checkpoints", &c.keep_best_checkpoints, "keep the best N checkpoints (<= 0 = off)").at_least(-1);
  s.add("no_save", &c.no_save, "do not save checkpoints");
  s.add("no_epoch_checkpoints", &c.no_epoch_checkpoints, "only save the last and best checkpoints");
  s.add("no_last_checkpoints", &c.no_last_checkpoints, "do not save the last checkpoint");
  s.add("no_save_optimizer_state", &c.no_save_optimizer_state, "do not save the optimizer state");
  s.add("best_checkpoint_metric", &c.best_checkpoint_metric, "validation metric that selects the best checkpoint");
  s.add("maximize_best_checkpoint_metric", &c.maximize_best_checkpoint_metric,
        "larger values of best_checkpoint_metric are better");
  s.add("patience", &c.patience, "stop after N validations without improvement (<= 0 = off)").at_least(-1);
  s.add("checkpoint_suffix", &c.checkpoint_suffix, "suffix to add to checkpoint file names");
}

void describe(GenerationConfig& c, Section& s) {
  s.add("beam", &c.beam, "beam size").greater_than(0);
  s.add("nbest", &c.nbest, "number of hypotheses to output").greater_than(0);
  s.add("max_len_a", &c.max_len_a, "maximum output length is a * source length + b").at_least(0);
  s.add("max_len_b", &c.max_len_b, "maximum output length is a * source length + b").at_least(0);
  s.add("min_len", &c.min_len, "minimum output length").at_least(0);
  s.add("match_source_len", &c.match_source_len, "outputs must have the source length");
  s.add("unnormalized", &c.unnormalized, "compare unnormalized hypothesis scores");
  s.add("lenpen", &c.lenpen, "length penalty: < 1 favours shorter, > 1 longer outputs");
  s.add("unkpen", &c.unkpen, "unknown word penalty: < 0 gives more unks, > 0 fewer");
  s.add("sacrebleu", &c.sacrebleu, "score with sacrebleu");
  s.add("score_reference", &c.score_reference, "only score the reference translations");
  s.add("prefix_size", &c.prefix_size, "start generation from a target prefix of this length").at_least(0);
  s.add("no_repeat_ngram_size", &c.no_repeat_ngram_size, "never repeat an n-gram of this size (0 = off)").at_least(0);
  s.add("sampling", &c.sampling, "sample hypotheses instead of beam search");
  s.add("sampling_topk", &c.sampling_topk, "sample from the K most likely words (-1 = all)").at_least(-1);
  s.add("sampling_topp", &c.sampling_topp, "sample from the smallest set with this probability mass (< 0 = off)")
      .in_range(-1, 1);
  s.add("temperature", &c.temperature, "softmax temperature for generation").greater_than(0);
  s.add("diverse_beam_groups", &c.diverse_beam_groups, "number of groups for diverse beam search (<= 0 = off)");
  s.add("diverse_beam_strength", &c.diverse_beam_strength, "strength of diverse beam search's diversity penalty");
  s.add("print_alignment", &c.print_alignment,
        "print each hypothesis' alignment to the source from the last decoder layer's attention (A- lines): "
        "hard (alone) or soft")
      .one_of({"", "hard", "soft"})
      .when_bare("hard");
  s.add("replace_unk", &c.replace_unk,
        "replace <unk> in hypotheses by the aligned source word (alone, or `copy`), or by its translation in this "
        "alignment dictionary file")
      .when_bare(kCopySourceWord);
  s.add("quantize", &c.quantize,
        "run the linear layers with int8 weights (per output channel) and int8 activations (per row, "
        "quantized at each call): none or int8 (CPU with AVX-512 VNNI or AVX2)")
      .one_of({"none", "int8"});
  s.add("retain_dropout", &c.retain_dropout,
        "keep dropout active at inference, as in training (the model's dropout probabilities; outputs vary with "
        "common.seed)");
  s.add("constraints", &c.constraints,
        "interactive: lexically constrained decoding; each input line is the source, then TAB-separated target "
        "phrases that every output must hold, in their order (ordered; the value alone) or in any (unordered)")
      .one_of({"", "ordered", "unordered"})
      .when_bare("ordered");
}

void describe(PreprocessConfig& c, Section& s) {
  s.add("trainpref", &c.trainpref, "train file prefix (also used to build dictionaries)");
  s.add("validpref", &c.validpref, "comma-separated valid file prefixes");
  s.add("testpref", &c.testpref, "comma-separated test file prefixes");
  s.add("destdir", &c.destdir, "destination directory");
  s.add("thresholdtgt", &c.thresholdtgt, "map target words seen fewer times to <unk>").at_least(0);
  s.add("thresholdsrc", &c.thresholdsrc, "map source words seen fewer times to <unk>").at_least(0);
  s.add("tgtdict", &c.tgtdict, "reuse this target dictionary");
  s.add("srcdict", &c.srcdict, "reuse this source dictionary");
  s.add("nwordstgt", &c.nwordstgt, "number of target words to keep (-1 = all)").at_least(-1);
  s.add("nwordssrc", &c.nwordssrc, "number of source words to keep (-1 = all)").at_least(-1);
  s.add("joined_dictionary", &c.joined_dictionary, "build one dictionary for both languages");
  s.add("only_source", &c.only_source, "only process the source language");
  s.add("padding_factor", &c.padding_factor, "pad dictionary sizes to a multiple of N").greater_than(0);
  s.add("workers", &c.workers, "number of parallel workers").greater_than(0);
  s.add("dict_only", &c.dict_only, "only build the dictionaries");
  s.add("spm_model", &c.spm_model, "encode raw text with this SentencePiece model");
  s.add("spm_vocab_size", &c.spm_vocab_size, "train a SentencePiece model of this vocab size (0 = do not)").at_least(0);
  s.add("spm_model_type", &c.spm_model_type, "SentencePiece model type").one_of({"unigram", "bpe", "char", "word"});
  s.add("spm_character_coverage", &c.spm_character_coverage, "SentencePiece character coverage").in_range(0, 1);
  s.add("spm_input_sentence_size", &c.spm_input_sentence_size,
        "train SentencePiece on a sample of this many sentences, drawn with a fixed seed (0 = every sentence)")
      .at_least(0);
}

void describe(InteractiveConfig& c, Section& s) {
  s.add("buffer_size", &c.buffer_size, "read this many sentences before translating them as a batch").greater_than(0);
  s.add("input", &c.input, "file to translate (- or /dev/stdin = standard input)");
  s.add("sentencepiece_model", &c.sentencepiece_model,
        "SentencePiece model that encodes raw input (empty = DATA/spm.model)");
}

void describe(ScoringConfig& c, Section& s) {
  s.add("sys", &c.sys,
        "hypothesis files, one sentence per line (- = standard input); several: a table, and with a paired test "
        "the first is the baseline (sacreBLEU's -i)");
  s.add("ref", &c.ref, "reference files, one sentence per line each (--ref a.de b.de: two references)");
  s.add("metric", &c.metric, "comma-separated metrics: bleu, chrf, chrf++, ter (sacreBLEU's)");
  s.add("tokenize", &c.tokenize, "BLEU's tokenizer, as sacreBLEU's --tokenize")
      .one_of({"13a", "intl", "zh", "char", "none"});
  s.add("lowercase", &c.lowercase, "BLEU on lowercased text (sacreBLEU's --lowercase)");
  s.add("smooth_method", &c.smooth_method, "BLEU's smoothing").one_of({"exp", "floor", "add-k", "none"});
  s.add("smooth_value", &c.smooth_value, "the value of floor (default 0.1) and add-k (default 1) smoothing")
      .at_least(0);
  s.add("chrf_char_order", &c.chrf_char_order, "chrF's character n-gram order").at_least(0);
  s.add("chrf_word_order", &c.chrf_word_order, "chrF's word n-gram order (2: chrF++)").at_least(0);
  s.add("chrf_beta", &c.chrf_beta, "chrF's recall weight").at_least(0);
  s.add("chrf_whitespace", &c.chrf_whitespace, "chrF: keep whitespace in character n-grams");
  s.add("chrf_lowercase", &c.chrf_lowercase, "chrF on lowercased text");
  s.add("chrf_eps_smoothing", &c.chrf_eps_smoothing, "chrF: chrF++.py's epsilon smoothing instead of effective order");
  s.add("ter_case_sensitive", &c.ter_case_sensitive, "TER: keep case (TER lowercases by default)");
  s.add("ter_normalized", &c.ter_normalized, "TER: Tercom's normalisation (punctuation apart, entities decoded)");
  s.add("ter_no_punct", &c.ter_no_punct, "TER: remove punctuation");
  s.add("ter_asian_support", &c.ter_asian_support, "TER: CJK characters and punctuation apart (with the two above)");
  s.add("width", &c.width, "decimals of the printed scores (sacreBLEU's --width)").in_range(0, 10);
  s.add("confidence", &c.confidence, "one system: the bootstrap mean and 95% confidence interval of each score");
  s.add("confidence_n", &c.confidence_n, "bootstrap resamples of --confidence").at_least(2);
  s.add("paired_bs", &c.paired_bs, "several systems: paired bootstrap resampling against the first (baseline)");
  s.add("paired_bs_n", &c.paired_bs_n, "resamples of --paired-bs").at_least(1);
  s.add("paired_ar", &c.paired_ar, "several systems: paired approximate randomization against the first (baseline)");
  s.add("paired_ar_n", &c.paired_ar_n, "trials of --paired-ar").at_least(1);
  s.add("resample_seed", &c.resample_seed,
        "seed of the resamples and trials, as sacreBLEU's SACREBLEU_SEED (numpy's default_rng)")
      .at_least(0);
}

void describe(EmaConfig& c, Section& s) {
  s.add("store_ema", &c.store_ema, "keep an exponential moving average (EMA) of the weights, saved in checkpoints");
  s.add("ema_decay", &c.ema_decay, "decay of the EMA: shadow = decay * shadow + (1 - decay) * weights")
      .at_least(0)
      .at_most(1);
  s.add("ema_start_update", &c.ema_start_update, "before this many updates the EMA copies the weights").at_least(0);
  s.add("ema_seed_model", &c.ema_seed_model, "start the EMA from this checkpoint's EMA weights");
  s.add("ema_update_freq", &c.ema_update_freq, "one EMA step every this many updates").at_least(1);
  s.add("ema_fp32", &c.ema_fp32, "keep the EMA in float32")
      .same_for_every_value("the EMA is always float32 here, as the weights are");
  s.add("validate_with_ema", &c.validate_with_ema,
        "validate (loss, BLEU, best checkpoint) with the EMA weights instead of the model's");
}

void describe(AverageConfig& c, Section& s) {
  s.add("inputs", &c.inputs,
        "checkpoints to average, or the directory that holds them with --num-epoch-checkpoints or "
        "--num-update-checkpoints");
  s.add("output", &c.output, "the averaged checkpoint to write");
  s.add("num_epoch_checkpoints", &c.num_epoch_checkpoints,
        "average the last N epoch checkpoints (checkpointEPOCH.pt) of the --inputs directory")
      .at_least(0);
  s.add("num_update_checkpoints", &c.num_update_checkpoints,
        "average the last N update checkpoints (checkpoint_EPOCH_UPDATES.pt) of the --inputs directory")
      .at_least(0);
  s.add("num_best_checkpoints", &c.num_best_checkpoints,
        "average the N best checkpoints (checkpoint.best_METRIC_VALUE.pt, kept by checkpoint.keep_best_checkpoints) "
        "of the --inputs directory")
      .at_least(0);
  s.add("checkpoint_upper_bound", &c.checkpoint_upper_bound,
        "with --num-epoch-checkpoints (--num-update-checkpoints): the last epoch (update) to use")
      .at_least(0);
}

std::vector<Section> describe(Config& cfg) {
  std::vector<Section> sections;
  sections.reserve(16);
  sections.emplace_back("common", "logging, seeds, threads and precision");
  describe(cfg.common, sections.back());
  sections.emplace_back("common_eval", "the checkpoint to evaluate and how to print its output");
  describe(cfg.common_eval, sections.back());
  sections.emplace_back("distributed_training", "data-parallel training across processes");
  describe(cfg.distributed_training, sections.back());
  sections.emplace_back("dataset", "batching, data subsets, validation schedule and data loading");
  describe(cfg.dataset, sections.back());
  sections.emplace_back("task", "the translation task: data, languages, lengths, BLEU during validation");
  describe(cfg.task, sections.back());
  sections.emplace_back("model", "transformer architecture; unset keys take the `arch` preset's values");
  describe(cfg.model, sections.back());
  sections.emplace_back("criterion", "training loss");
  describe(cfg.criterion, sections.back());
  sections.emplace_back("optimizer", "optimizer (adam, sgd, nag) and its settings");
  describe(cfg.optimizer, sections.back());
  sections.emplace_back("lr_scheduler", "learning rate schedule; the peak rate is `optimization.lr`");
  describe(cfg.lr_scheduler, sections.back());
  sections.emplace_back("optimization", "stopping rules, gradient accumulation and clipping, learning rate");
  describe(cfg.optimization, sections.back());
  sections.emplace_back("checkpoint", "saving and resuming checkpoints, early stopping");
  describe(cfg.checkpoint, sections.back());
  sections.emplace_back("ema", "exponential moving average of the weights");
  describe(cfg.ema, sections.back());
  sections.emplace_back("generation", "beam search and sampling");
  describe(cfg.generation, sections.back());
  sections.emplace_back("preprocess", "fairseq-preprocess: dictionaries, binarized data, SentencePiece");
  describe(cfg.preprocess, sections.back());
  sections.emplace_back("interactive", "fairseq-interactive: input and SentencePiece model for raw text");
  describe(cfg.interactive, sections.back());
  sections.emplace_back("scoring", "fairseq-score: hypothesis and reference files, metrics");
  describe(cfg.scoring, sections.back());
  sections.emplace_back("average", "average_checkpoints.py: the checkpoints to average and the output");
  describe(cfg.average, sections.back());
  return sections;
}

namespace {

std::string str(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

std::string str(bool v) { return v ? "true" : "false"; }

std::string str(int64_t v) { return std::to_string(v); }

// The training keys that depend on each other: EMA, precision, criterion, schedule, Adam.
void check_training(const Config& cfg, std::vector<std::string>& errors) {
  // fairseq's two other backends: refused with the reason, and what to use instead.
  const std::string& ddp = cfg.distributed_training.ddp_backend;
  if (ddp == "fully_sharded" || ddp == "slowmo") {
    errors.push_back("`distributed_training.ddp_backend` must be c10d, pytorch_ddp, no_c10d or legacy_ddp, but is " +
                     ddp + " instead: " +
                     (ddp == "slowmo"
                          ? std::string("SlowMo (fairscale's slow momentum, which averages the weights every few "
                                        "updates) is not implemented; the other backends average every update's "
                                        "gradients exactly.")
                          : std::string("fully sharded data parallel (FSDP) is not implemented; "
                                        "`distributed_training.zero_sharding: os` or `os_grad` shards the optimizer "
                                        "state (and gradients) and "
                                        "`model.checkpoint_activations` recomputes activations in backward.")));
  }
  if (!cfg.ema.store_ema && (cfg.ema.validate_with_ema || !cfg.ema.ema_seed_model.empty())) {
    errors.push_back(std::string("`ema.store_ema` must be true when `ema.") +
                     (cfg.ema.validate_with_ema ? "validate_with_ema` is true" : "ema_seed_model` is set") +
                     ", but is false instead.");
  }
  if (cfg.common.fp16 && cfg.common.bf16) {
    errors.push_back("`common.bf16` must be false when `common.fp16` is true, but is " + str(cfg.common.bf16) +
                     " instead.");
  }
  if (!cfg.common.fp16 && !cfg.common.fp16_fallback.empty()) {
    errors.push_back("`common.fp16` must be true when `common.fp16_fallback` is set (to " + cfg.common.fp16_fallback +
                     "), but is false instead.");
  }
  if (cfg.criterion._name == "cross_entropy" && cfg.criterion.label_smoothing > 0) {
    errors.push_back(
        "`criterion.label_smoothing` must be 0 for `criterion._name` cross_entropy "
        "(use label_smoothed_cross_entropy), but is " +
        str(cfg.criterion.label_smoothing) + " instead.");
  }
  if (cfg.lr_scheduler._name == "inverse_sqrt" && cfg.lr_scheduler.warmup_updates == 0) {
    errors.push_back(
        "`lr_scheduler.warmup_updates` must be greater than 0 for `lr_scheduler._name` "
        "inverse_sqrt (leave it out for fairseq's 4000), but is 0 instead.");
  }
  const std::vector<double>& betas = cfg.optimizer.adam_betas;
  if (betas.size() != 2) {
    errors.push_back("`optimizer.adam_betas` must have exactly 2 values, but has " + std::to_string(betas.size()) +
                     " instead.");
  }
  for (double beta : betas) {
    if (!(beta >= 0 && beta < 1)) {
      errors.push_back("`optimizer.adam_betas` values must be in [0, 1), but one is " + str(beta) + " instead.");
    }
  }
}

// The search's keys: nbest, beam, and the searches that exclude each other.
void check_generation(const Config& cfg, std::vector<std::string>& errors) {
  if (cfg.generation.nbest > cfg.generation.beam) {
    errors.push_back("`generation.nbest` must be at most `generation.beam` (" + str(cfg.generation.beam) +
                     "), but is " + str(cfg.generation.nbest) + " instead.");
  }
  const GenerationConfig& gen = cfg.generation;
  if (gen.diverse_beam_groups > 0 && gen.beam % gen.diverse_beam_groups != 0) {
    errors.push_back("`generation.diverse_beam_groups` must divide `generation.beam` (" + str(gen.beam) + "), but is " +
                     str(gen.diverse_beam_groups) + " instead.");
  }
  // fairseq's build_generator: "Provided Search parameters are mutually exclusive."
  if (gen.diverse_beam_groups > 0 && (gen.sampling || gen.match_source_len)) {
    errors.push_back(std::string("`generation.diverse_beam_groups` must be -1 (off) with `generation.") +
                     (gen.sampling ? "sampling" : "match_source_len") + "`, which chooses another search, but is " +
                     str(gen.diverse_beam_groups) + " instead.");
  }
  if (gen.sampling && gen.match_source_len) {
    errors.push_back(
        "`generation.match_source_len` must be false with `generation.sampling`, which chooses another search, but "
        "is true instead.");
  }
  // fairseq: "--constraints only works with --beam search" (LexicallyConstrainedBeamSearch).
  if (!gen.constraints.empty() && (gen.sampling || gen.diverse_beam_groups > 0 || gen.match_source_len)) {
    errors.push_back("`generation.constraints` must be empty (off) with `generation." +
                     std::string(gen.sampling                  ? "sampling"
                                 : gen.diverse_beam_groups > 0 ? "diverse_beam_groups"
                                                               : "match_source_len") +
                     "`: constrained decoding is a beam search of its own, but is " + gen.constraints + " instead.");
  }
}

// fairseq-cpp-eval score's keys.
void check_scoring(const Config& cfg, std::vector<std::string>& errors) {
  const ScoringConfig& sc = cfg.scoring;
  if (sc.paired_bs && sc.paired_ar) {
    errors.push_back("`scoring.paired_ar` must be false when `scoring.paired_bs` is true, but is true instead.");
  }
  if (sc.sys.size() > 1 && sc.confidence) {
    errors.push_back("`scoring.confidence` must be false with " + std::to_string(sc.sys.size()) +
                     " systems (use --paired-bs, which gives each system's interval), but is true instead.");
  }
  if (sc.sys.size() == 1 && (sc.paired_bs || sc.paired_ar)) {
    errors.push_back(std::string("`scoring.sys` must name a baseline and at least one system for `scoring.") +
                     (sc.paired_bs ? "paired_bs" : "paired_ar") + "`, but names 1 file instead.");
  }
}

// fairseq-cpp-eval average's keys: one way to choose the files.
void check_average(const Config& cfg, std::vector<std::string>& errors) {
  const AverageConfig& av = cfg.average;
  if (av.num_epoch_checkpoints > 0 && av.num_update_checkpoints > 0) {
    errors.push_back(
        "`average.num_update_checkpoints` must be 0 when `average.num_epoch_checkpoints` is set "
        "(average epoch or update checkpoints, not both), but is " +
        str(av.num_update_checkpoints) + " instead.");
  }
  if (av.num_best_checkpoints > 0 && (av.num_epoch_checkpoints > 0 || av.num_update_checkpoints > 0)) {
    errors.push_back(
        "`average.num_best_checkpoints` must be 0 when `average.num_epoch_checkpoints` or "
        "`average.num_update_checkpoints` is set (one way to choose the files), but is " +
        str(av.num_best_checkpoints) + " instead.");
  }
  if (av.checkpoint_upper_bound && av.num_epoch_checkpoints == 0 && av.num_update_checkpoints == 0) {
    errors.push_back(
        "`average.checkpoint_upper_bound` needs `average.num_epoch_checkpoints` or "
        "`average.num_update_checkpoints`, but both are 0.");
  }
}

}  // namespace

// A preset's `task.data` placeholder, "<what to put here>", left in place.
void check_placeholder(const Config& cfg, std::vector<std::string>& errors) {
  const std::string& data = cfg.task.data;
  if (data.size() < 2 || data.front() != '<' || data.back() != '>') return;
  errors.push_back("`task.data` must be a data-bin directory, but is the preset's placeholder " + data +
                   " instead; put that there: task.data=DIR, --data DIR, or DIR after the config file.");
}

void check_consistency(const Config& cfg, std::vector<std::string>& errors) {
  check_placeholder(cfg, errors);
  check_training(cfg, errors);
  check_generation(cfg, errors);
  if (cfg.optimization.lr.empty()) {
    errors.push_back("`optimization.lr` must have at least one value, but is empty instead.");
  }
  if (cfg.optimization.update_freq.empty()) {
    errors.push_back("`optimization.update_freq` must have at least one value, but is empty instead.");
  }
  check_scoring(cfg, errors);
  check_average(cfg, errors);
  if (cfg.dataset.shard_id >= cfg.dataset.num_shards) {
    errors.push_back("`dataset.shard_id` must be less than `dataset.num_shards` (" + str(cfg.dataset.num_shards) +
                     "), but is " + str(cfg.dataset.shard_id) + " instead.");
  }
}

}  // namespace fairseq_cpp::config

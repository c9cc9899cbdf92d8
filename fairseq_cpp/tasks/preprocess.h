#pragma once
// fairseq-cpp-preprocess: text (optionally SentencePiece-encoded first) -> dictionaries and a
// fairseq data-bin, byte for byte what fairseq-preprocess writes for the same input and options.
// Every input is read and checked before anything is written.

#include <cstdint>
#include <string>

#include "fairseq_cpp/config/sections.h"

namespace fairseq_cpp::tasks {

struct PreprocessOptions {
  std::string source_lang;                 // source language suffix of the text files (required)
  std::string target_lang;                 // target language suffix (required unless only_source)
  std::string trainpref;                   // <trainpref>.<lang>: train text; builds the dictionaries
  std::string validpref;                   // comma-separated valid prefixes; empty = none
  std::string testpref;                    // comma-separated test prefixes; empty = none
  std::string destdir = "data-bin";        // output directory (created)
  bool joined_dictionary = false;          // one dictionary from both languages' train text
  std::string srcdict;                     // reuse this source dictionary; empty = build one
  std::string tgtdict;                     // reuse this target dictionary; empty = build one
  int64_t nwordssrc = -1;                  // source dictionary size incl. specials; <= 0 = all
  int64_t nwordstgt = -1;                  // target dictionary size incl. specials; <= 0 = all
  int64_t thresholdsrc = 0;                // drop source symbols seen fewer times; 0 = keep all
  int64_t thresholdtgt = 0;                // drop target symbols seen fewer times; 0 = keep all
  int64_t padding_factor = 8;              // pad dictionaries to a multiple of this; <= 1 = none
  int64_t workers = 1;                     // threads
  bool only_source = false;                // the source language only
  bool dict_only = false;                  // write the dictionaries and stop
  std::string dataset_impl = "mmap";       // mmap (binary) | raw (copy the text)
  std::string spm_model;                   // encode the text with this SentencePiece model first
  int64_t spm_vocab_size = 0;              // > 0: train a joint model of this size first (destdir/spm.model)
  std::string spm_model_type = "unigram";  // SentencePiece model type for training
  double spm_character_coverage = 1.0;     // SentencePiece character coverage for training
  int64_t spm_input_sentence_size = 2000000;  // sentences SentencePiece trains on (a seeded sample); 0 = all
};

PreprocessOptions preprocess_options(const config::Config& cfg);

// Runs the whole preprocessing; throws UserError/DataError on bad input (nothing written then).
void preprocess(const PreprocessOptions& options);

}  // namespace fairseq_cpp::tasks

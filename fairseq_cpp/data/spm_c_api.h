#pragma once
// The C interface of libfsq_spm.so, our wrapper of SentencePiece. Programs that load LibTorch must
// not link SentencePiece (LIBTORCH.md, trap 3), so they dlopen this library instead
// (data/sentencepiece.h). Errors come back as a NUL-terminated message in `err`.

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fsq_spm fsq_spm;

// The model at `path`, or NULL (with the reason in `err`).
typedef fsq_spm* (*fsq_spm_load_fn)(const char* path, char* err, size_t err_size);
typedef void (*fsq_spm_free_fn)(fsq_spm* model);
typedef int (*fsq_spm_vocab_size_fn)(const fsq_spm* model);
// Encodes `text` into its pieces joined by single spaces (spm_encode --output_format=piece).
// Returns the bytes of the result, writing at most `cap` of them to `out` (call again with a larger
// buffer when the result is larger than `cap`); -1 on error.
typedef long (*fsq_spm_encode_pieces_fn)(const fsq_spm* model, const char* text, size_t len, char* out, size_t cap);
// The same as ids (spm_encode --output_format=id).
typedef long (*fsq_spm_encode_ids_fn)(const fsq_spm* model, const char* text, size_t len, int* out, size_t cap);
// spm_train with `n` flags given as names and values ("input", "a.txt,b.txt"). 0 on success.
typedef int (*fsq_spm_train_fn)(const char* const* names, const char* const* values, size_t n, char* err,
                                size_t err_size);

#ifdef __cplusplus
}
#endif

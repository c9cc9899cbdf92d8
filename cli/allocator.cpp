// The memory allocator's settings for the programs that run a model. They link jemalloc when the
// build finds it (CMakeLists.txt): glibc's malloc keeps the freed activations of one update as
// fragments that the next cannot reuse, and a Multi30k training run peaked at 1,125 MiB with it
// against 877 MiB with jemalloc, 6% faster (README, "Measured"). jemalloc reads this string when
// it starts: one arena (a training process allocates from one thread; LibTorch's workers rarely
// allocate), and freed pages are kept for reuse instead of returned and faulted in again.
extern "C" {
// NOLINTNEXTLINE: jemalloc looks this global up by name.
const char* malloc_conf = "narenas:1,dirty_decay_ms:-1,muzzy_decay_ms:-1";
}

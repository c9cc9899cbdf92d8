#pragma once
// The translation task's training: the one place where the config becomes wired objects (the
// task's data-bins and dictionaries, model, criterion, optimizer, schedule, trainer, batch
// iterator, validator with BLEU, checkpoint writer), restored from a checkpoint to resume, and
// handed to trainer::TrainingLoop (epochs, validation, checkpoints, early stopping, stop signals).

#include "fairseq_cpp/config/sections.h"
#include "fairseq_cpp/distributed/gang.h"

namespace fairseq_cpp::tasks {

// Exit code after a stop signal (SIGTERM, SIGINT, SIGUSR1 on any rank): every rank saved
// checkpoint_last.pt at the same update; running the same command again resumes.
inline constexpr int kExitStopped = 3;

// Installs the handlers for the stop signals (before any thread starts).
void install_stop_handlers();

// Trains on this worker of `gang`; returns the exit code (0, or kExitStopped).
int train_translation(const config::Config& cfg, distributed::Gang& gang);

}  // namespace fairseq_cpp::tasks

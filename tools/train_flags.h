// adjoint-train's command line as values: every flag's setting in one struct, the range check
// that runs before anything starts (so that `--min-lr -1` is an error naming the flag, not a
// failure in AdamW a thousand steps later), the thread count of a run or a resume, and the
// text of durations on the progress line. Kept out of train.cpp so tests check them directly.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "gpt_trainer.h"
#include "gradient_health.h"

namespace adjoint::tools {

/// Everything adjoint-train's flags set, with their defaults.
struct TrainFlags {
  TrainConfig config;  ///< the run's settings (run_state.h records them)
  std::string out_dir = "out";
  std::string resume;  ///< a checkpoint to continue, or empty
  int64_t sample_length = 400;
  int64_t stop_after = 0;    ///< 0: run to --steps
  int64_t profile_step = 0;  ///< 0: no profile
  int threads = 0;           ///< 0: every core (see threads_for_run)
  int zero = 0;              ///< ZeRO stage under mpirun
  bool detect_anomaly = false;
  GradientHealthOptions health;
};

/// The default --min-lr (TrainConfig's) unless the flag was given: when --lr is below it, the
/// cosine decay ends at --lr instead (a constant rate after warmup) rather than rising.
/// Nothing on a resume, whose settings come from the checkpoint.
void settle_defaults(TrainFlags& flags, const std::function<bool(std::string_view flag)>& given);

/// Throws adjoint::Error (Value, op "train") at the first flag out of its range, naming the
/// flag, its value and the range: sizes and --steps positive; rates, decay, the loss scale
/// and the gradient thresholds finite, none negative; counts >= 0; --zero 0, 1 or 2;
/// --grad-explode above --grad-vanish. For a new run also --width a multiple of --heads and
/// --min-lr at most --lr (a resume continues the checkpoint's run as it was; the flags it is
/// given must match that run, which adopt_run_config checks).
void check_flags(const TrainFlags& flags);

/// The kernel threads of this process, from --threads (`flag`, nullopt when not given): a
/// positive count as given; 0 every core, shared among the ranks on one machine. Left out on
/// a resume: the checkpoint's count (the same count keeps the run bitwise the same), but at
/// most this machine's share of the cores; left out otherwise, as 0. A result of 0 means
/// "every core" in one process (the library's default stays). `cores` 0: unknown, no cap.
int threads_for_run(std::optional<int> flag, std::optional<int64_t> checkpoint_threads,
                    unsigned cores, int world_size);

/// A duration as the progress line prints it: "42s", "3m07s", "5h03m", "12d05h", then whole
/// years ("31710y") up to a billion; "--" when it cannot be computed (NaN, infinite or
/// negative, e.g. an ETA before the first timed step).
std::string format_duration(double seconds);

}  // namespace adjoint::tools

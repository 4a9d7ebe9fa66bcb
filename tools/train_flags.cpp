// adjoint-train's flag checks, thread count and duration text; see train_flags.h.
#include "train_flags.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace adjoint::tools {
namespace {

constexpr const char* kOp = "train";

// The shortest text that reads back as `v`, written as %g would ("0.0003", "1e-07", "-1").
std::string number(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return std::string(buf, ec == std::errc() ? end : buf);
}

void positive(const char* flag, int64_t v) {
  ADJOINT_CHECK(v >= 1, Value, kOp, flag, " must be a positive integer, got ", v);
}

void not_negative(const char* flag, int64_t v) {
  ADJOINT_CHECK(v >= 0, Value, kOp, flag, " must be an integer >= 0, got ", v);
}

// Rates, decay and thresholds: NaN and infinities are refused too (a NaN passes v >= 0 in no
// comparison, which is why the test is written as !(v >= 0)).
void finite_not_negative(const char* flag, double v) {
  ADJOINT_CHECK(std::isfinite(v) && !(v < 0), Value, kOp, flag,
                " must be a finite number >= 0, got ", number(v));
}

void finite_positive(const char* flag, double v) {
  ADJOINT_CHECK(std::isfinite(v) && v > 0, Value, kOp, flag, " must be a finite number > 0, got ",
                number(v));
}

}  // namespace

void settle_defaults(TrainFlags& flags, const std::function<bool(std::string_view)>& given) {
  if (!flags.resume.empty() || given("--min-lr")) return;
  flags.config.min_lr = std::min(flags.config.min_lr, flags.config.lr);
}

void check_flags(const TrainFlags& f) {
  const TrainConfig& c = f.config;
  positive("--layers", c.model.layers);
  positive("--width", c.model.d_model);
  positive("--heads", c.model.heads);
  positive("--context", c.model.context);
  positive("--batch", c.batch);
  positive("--steps", c.steps);
  not_negative("--warmup", c.warmup);
  finite_not_negative("--lr", c.lr);
  finite_not_negative("--min-lr", c.min_lr);
  finite_not_negative("--weight-decay", c.weight_decay);
  finite_positive("--loss-scale", c.init_loss_scale);
  positive("--eval-every", c.eval_every);
  not_negative("--save-every", c.save_every);
  not_negative("--stop-after", f.stop_after);
  not_negative("--sample-length", f.sample_length);
  not_negative("--profile", f.profile_step);
  not_negative("--threads", f.threads);
  ADJOINT_CHECK(f.zero >= 0 && f.zero <= 2, Value, kOp, "--zero must be 0, 1 or 2, got ", f.zero);
  ADJOINT_CHECK(c.arch == "gpt" || c.arch == "llama", Value, kOp,
                "--arch must be gpt or llama, got '", c.arch, "'");
  not_negative("--kv-heads", c.kv_heads);
  ADJOINT_CHECK(c.attention.empty() || c.attention == "math" || c.attention == "fused", Value, kOp,
                "--attention must be math or fused, got '", c.attention, "'");
  ADJOINT_CHECK(c.arch != "llama" || c.attention != "math", Value, kOp,
                "--attention math is a GPT's: a Llama's attention runs on the fused kernel only");
  not_negative("--grad-every", f.health.every);
  finite_not_negative("--grad-vanish", f.health.vanish_below);
  positive("--grad-vanish-records", f.health.vanish_records);
  finite_positive("--grad-explode", f.health.explode_above);
  ADJOINT_CHECK(f.health.explode_above > f.health.vanish_below, Value, kOp, "--grad-explode ",
                number(f.health.explode_above), " must be above --grad-vanish ",
                number(f.health.vanish_below));
  // Between settings of the run: a resume takes what is left out from the checkpoint, whose
  // run is continued as it was, so these hold for a new run only.
  if (!f.resume.empty()) return;
  ADJOINT_CHECK(c.model.d_model % c.model.heads == 0, Value, kOp, "--width ", c.model.d_model,
                " must be a multiple of --heads ", c.model.heads,
                ": each head gets an equal share of the width");
  if (c.arch == "llama") {
    const int64_t kv = c.kv_heads > 0 ? c.kv_heads : c.model.heads;
    ADJOINT_CHECK(c.model.heads % kv == 0, Value, kOp, "--heads ", c.model.heads,
                  " must be a multiple of --kv-heads ", kv,
                  ": each key/value head serves an equal group of query heads");
    ADJOINT_CHECK(c.model.d_model / c.model.heads % 2 == 0, Value, kOp, "--width ", c.model.d_model,
                  " / --heads ", c.model.heads,
                  " must be even: rotary embedding turns pairs of a head's features");
  }
  ADJOINT_CHECK(c.min_lr <= c.lr, Value, kOp, "--min-lr ", number(c.min_lr), " is above --lr ",
                number(c.lr),
                ": the learning rate decays from --lr to --min-lr, so --min-lr must be at most "
                "--lr");
}

int threads_for_run(std::optional<int> flag, std::optional<int64_t> checkpoint_threads,
                    unsigned cores, int world_size) {
  if (flag && *flag > 0) return *flag;
  const int share = cores == 0 ? 0 : std::max(1, static_cast<int>(cores) / std::max(1, world_size));
  if (!flag && checkpoint_threads) {
    const int64_t stored =
        std::clamp<int64_t>(*checkpoint_threads, 1, std::numeric_limits<int>::max());
    return static_cast<int>(share > 0 ? std::min<int64_t>(stored, share) : stored);
  }
  return world_size > 1 ? std::max(1, share) : 0;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  constexpr double kDay = 86400, kYear = 365.25 * kDay;
  char buf[32];
  if (seconds >= 365 * kDay) {
    const double years = std::round(seconds / kYear);
    if (years >= 1e9) return ">999999999y";
    std::snprintf(buf, sizeof buf, "%.0fy", years);
    return buf;
  }
  const auto s = static_cast<int64_t>(std::llround(seconds));  // below a year: fits
  const long long d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60, sec = s % 60;
  if (d > 0) {
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", d, h);
  } else if (h > 0) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", h, m);
  } else if (m > 0) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", m, sec);
  } else {
    std::snprintf(buf, sizeof buf, "%llds", sec);
  }
  return buf;
}

}  // namespace adjoint::tools

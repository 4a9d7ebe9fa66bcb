// loss.csv of adjoint-train: a header, then one row per step "step,train_loss,val_loss"
// (val_loss empty between evaluations). Each row is flushed as it is written, so a killed run
// keeps its log, and a resumed run continues the log of the run it resumes.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace adjoint::tools {

struct LossRow {
  int64_t step = 0;
  double train_loss = 0;
  std::optional<double> val_loss;
};

class LossLog {
 public:
  static constexpr const char* kHeader = "step,train_loss,val_loss";

  /// A new log at `path` (an existing file is replaced) holding the header line.
  static LossLog create(const std::string& path);
  /// The log of a run resumed at `step`: keeps the rows of steps up to `step` and cuts the
  /// file after them, dropping the later rows (the resumed run computes those steps again)
  /// and a last row cut short by a kill, then appends. A missing file starts a new log; so
  /// does a file that is not a loss log, with a note.
  static LossLog resume(const std::string& path, int64_t step);

  /// Writes one row and flushes it to the operating system. Throws adjoint::Error (IO).
  void append(int64_t step, double train_loss, std::optional<double> val_loss);

  /// The rows resume() kept (none after create()), for the loss plot.
  const std::vector<LossRow>& kept() const { return kept_; }
  /// What resume() found worth telling the user (rows dropped or missing), or "".
  const std::string& note() const { return note_; }

 private:
  explicit LossLog(std::string path) : path_(std::move(path)) {}
  void open(std::ios::openmode mode);

  std::string path_;
  std::ofstream out_;
  std::vector<LossRow> kept_;
  std::string note_;
};

}  // namespace adjoint::tools

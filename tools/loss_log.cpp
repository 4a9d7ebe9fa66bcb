// LossLog: loss.csv written row by row, flushed, and cut back to the checkpoint's step on
// resume; see loss_log.h.
#include "loss_log.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <sstream>

#include "adjoint/error.h"

namespace adjoint::tools {
namespace {

constexpr const char* kOp = "train";

template <class T>
std::optional<T> parse(std::string_view s) {
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// One row as append() writes it, or nullopt.
std::optional<LossRow> parse_row(std::string_view line) {
  const std::size_t a = line.find(','), b = line.find(',', a + 1);
  if (a == std::string_view::npos || b == std::string_view::npos ||
      line.find(',', b + 1) != std::string_view::npos)
    return std::nullopt;
  const std::optional<int64_t> step = parse<int64_t>(line.substr(0, a));
  const std::optional<double> train = parse<double>(line.substr(a + 1, b - a - 1));
  const std::string_view val_text = line.substr(b + 1);
  const std::optional<double> val = parse<double>(val_text);
  if (!step || !train || (!val_text.empty() && !val)) return std::nullopt;
  return LossRow{*step, *train, val};
}

}  // namespace

void LossLog::open(std::ios::openmode mode) {
  out_.open(path_, mode | std::ios::binary);
  ADJOINT_CHECK(out_.is_open(), IO, kOp, "cannot open '", path_, "': ", std::strerror(errno));
}

LossLog LossLog::create(const std::string& path) {
  LossLog log(path);
  log.open(std::ios::trunc);
  log.out_ << kHeader << "\n" << std::flush;
  ADJOINT_CHECK(log.out_.good(), IO, kOp, "cannot write '", path, "'");
  return log;
}

LossLog LossLog::resume(const std::string& path, int64_t step) {
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in.is_open()) return create(path);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string header = std::string(kHeader) + "\n";
  if (text.compare(0, header.size(), header) != 0) {
    LossLog log = create(path);
    log.note_ = path + " was not a loss log of adjoint-train: started a new one";
    return log;
  }
  LossLog log(path);
  // Keep complete rows up to `step`; the rows are in step order, so the kept ones are a
  // prefix of the file and cutting it at `keep` drops the rest.
  std::size_t keep = header.size();
  while (keep < text.size()) {
    const std::size_t nl = text.find('\n', keep);
    if (nl == std::string::npos) break;  // a row cut short by a kill
    const std::optional<LossRow> row = parse_row(std::string_view(text).substr(keep, nl - keep));
    if (!row || row->step > step || (!log.kept_.empty() && row->step <= log.kept_.back().step))
      break;
    log.kept_.push_back(*row);
    keep = nl + 1;
  }
  std::error_code ec;
  std::filesystem::resize_file(path, keep, ec);
  ADJOINT_CHECK(!ec, IO, kOp, "cannot cut '", path, "' back to step ", step, ": ", ec.message());
  const int64_t last = log.kept_.empty() ? 0 : log.kept_.back().step;
  std::ostringstream note;
  if (keep < text.size())
    note << path << ": dropped what followed step " << last
         << " (the resumed run computes those steps again)";
  if (last < step)
    note << (keep < text.size() ? "; " : "") << path << " has rows up to step " << last
         << " only, the checkpoint is at step " << step;
  log.note_ = note.str();
  log.open(std::ios::app);
  return log;
}

void LossLog::append(int64_t step, double train_loss, std::optional<double> val_loss) {
  // The format adjoint-train always wrote: the stream's default 6 significant digits for the
  // training loss, std::to_string's 6 decimals for the validation loss.
  out_ << step << "," << train_loss << "," << (val_loss ? std::to_string(*val_loss) : "") << "\n"
       << std::flush;
  ADJOINT_CHECK(out_.good(), IO, kOp, "cannot write '", path_, "'");
}

}  // namespace adjoint::tools

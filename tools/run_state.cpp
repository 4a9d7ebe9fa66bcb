// Encoding, strict decoding and comparison of an adjoint-train checkpoint's metadata; see
// run_state.h. Numbers are written so that they read back exactly (doubles in their shortest
// round-trip form) and read with std::from_chars, which neither throws nor accepts trailing
// junk, so every malformed value becomes a named adjoint::Error.
#include "run_state.h"

#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <type_traits>

namespace adjoint::tools {
namespace {

constexpr const char* kOp = "train";
constexpr int64_t kIntMax = std::numeric_limits<int64_t>::max();

// The settings of TrainConfig, each with its metadata key and the flag that sets it (or the
// member's name where adjoint-train has no flag). The model's keys are those older
// checkpoints already had, which adjoint-sample reads.
struct IntSetting {
  const char* key;
  const char* flag;
  int64_t min;
  int64_t& (*ref)(TrainConfig&);
  bool may_differ = false;  // adjoint-train's loop, not the trajectory (see kTexts)
};
const IntSetting kInts[] = {
    {"vocab", "vocab", 1, [](TrainConfig& c) -> int64_t& { return c.model.vocab; }},
    {"context", "--context", 1, [](TrainConfig& c) -> int64_t& { return c.model.context; }},
    {"d_model", "--width", 1, [](TrainConfig& c) -> int64_t& { return c.model.d_model; }},
    {"heads", "--heads", 1, [](TrainConfig& c) -> int64_t& { return c.model.heads; }},
    {"layers", "--layers", 1, [](TrainConfig& c) -> int64_t& { return c.model.layers; }},
    {"batch", "--batch", 1, [](TrainConfig& c) -> int64_t& { return c.batch; }},
    {"steps", "--steps", 1, [](TrainConfig& c) -> int64_t& { return c.steps; }},
    {"warmup", "--warmup", 0, [](TrainConfig& c) -> int64_t& { return c.warmup; }},
    {"eval_batches", "eval_batches", 1, [](TrainConfig& c) -> int64_t& { return c.eval_batches; }},
    {"eval_every", "--eval-every", 1, [](TrainConfig& c) -> int64_t& { return c.eval_every; },
     true},
    {"save_every", "--save-every", 0, [](TrainConfig& c) -> int64_t& { return c.save_every; },
     true},
};

struct RealSetting {
  const char* key;
  const char* flag;
  double max;  // exclusive; the minimum is always 0 (inclusive)
  double& (*ref)(TrainConfig&);
};
constexpr double kInf = std::numeric_limits<double>::infinity();
const RealSetting kReals[] = {
    {"lr", "--lr", kInf, [](TrainConfig& c) -> double& { return c.lr; }},
    {"min_lr", "--min-lr", kInf, [](TrainConfig& c) -> double& { return c.min_lr; }},
    {"weight_decay", "--weight-decay", kInf,
     [](TrainConfig& c) -> double& { return c.weight_decay; }},
    {"grad_clip", "grad_clip", kInf, [](TrainConfig& c) -> double& { return c.grad_clip; }},
    {"dropout", "dropout", 1.0, [](TrainConfig& c) -> double& { return c.model.dropout; }},
};

// Settings that may differ on resume: they change how a run executes or where it reads from,
// not what it computes (the data's content is checked separately).
struct TextSetting {
  const char* key;
  const char* flag;
  std::string& (*ref)(TrainConfig&);
};
const TextSetting kTexts[] = {
    {"checkpoint", "--checkpoint", [](TrainConfig& c) -> std::string& { return c.checkpoint; }},
    {"data.path", "--data", [](TrainConfig& c) -> std::string& { return c.data; }},
};

std::string real_text(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest exact form
  return std::string(buf, ec == std::errc() ? end : buf);
}

std::string hex_text(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

bool printable_ascii(const std::string& s) {
  for (unsigned char ch : s)
    if (ch < 0x20 || ch > 0x7e) return false;
  return true;
}

// A value as it appears in a message: quoted, control bytes shown as '?', long ones cut.
std::string quoted(const std::string& v) {
  std::string out = "\"";
  for (std::size_t i = 0; i < v.size() && i < 64; ++i) {
    const unsigned char ch = static_cast<unsigned char>(v[i]);
    out += ch < 0x20 || ch == 0x7f ? '?' : static_cast<char>(ch);
  }
  if (v.size() > 64) out += "...";
  return out + "\"";
}

// Reads keys of one checkpoint's metadata; every failure names the file, key and value.
class Reader {
 public:
  Reader(const io::Metadata& m, const std::string& path) : m_(m), path_(path) {}

  const std::string* find(const std::string& key) const {
    auto it = m_.find(key);
    return it == m_.end() ? nullptr : &it->second;
  }
  const std::string& text(const std::string& key) const {
    const std::string* v = find(key);
    ADJOINT_CHECK(v, IO, kOp, "'", path_, "': no '", key, "' in its metadata");
    return *v;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& expected) const {
    throw Error(ErrorKind::IO, kOp,
                "'" + path_ + "': metadata '" + key + "' is " + quoted(text(key)) + "; expected " +
                    expected);
  }

  // The whole of `v` as a T (base applies to integers), or nullopt: no sign for unsigned
  // types, no spaces, no trailing characters, nothing out of range.
  template <class T>
  static std::optional<T> parse(const std::string& v, int base = 10) {
    T out{};
    std::from_chars_result r;
    if constexpr (std::is_floating_point_v<T>) {
      r = std::from_chars(v.data(), v.data() + v.size(), out);
    } else {
      r = std::from_chars(v.data(), v.data() + v.size(), out, base);
    }
    if (r.ec != std::errc() || r.ptr != v.data() + v.size() || v.empty()) return std::nullopt;
    return out;
  }
  int64_t integer(const std::string& key, int64_t min, int64_t max = kIntMax,
                  const std::string& why = "") const {
    const std::optional<int64_t> v = parse<int64_t>(text(key));
    if (!v || *v < min || *v > max)
      fail(key,
           "an integer " +
               (max == kIntMax ? ">= " + std::to_string(min)
                               : "from " + std::to_string(min) + " to " + std::to_string(max)) +
               why);
    return *v;
  }
  uint64_t u64(const std::string& key) const {
    const std::optional<uint64_t> v = parse<uint64_t>(text(key));
    if (!v) fail(key, "an unsigned 64-bit integer");
    return *v;
  }
  uint64_t hex64(const std::string& key) const {
    const std::string& t = text(key);
    const std::optional<uint64_t> v = parse<uint64_t>(t, 16);
    if (!v || t.size() != 16) fail(key, "16 hexadecimal digits");
    return *v;
  }
  double real(const std::string& key, double max = kInf) const {
    const std::optional<double> v = parse<double>(text(key));
    if (!v || !std::isfinite(*v) || *v < 0 || *v >= max)
      fail(key, max == kInf ? "a finite number >= 0" : "a number >= 0 and < " + real_text(max));
    return *v;
  }
  double any_real(const std::string& key) const {
    const std::optional<double> v = parse<double>(text(key));
    if (!v || !std::isfinite(*v)) fail(key, "a finite number");
    return *v;
  }
  Generator::State generator(const std::string& prefix) const {
    Generator::State s{};
    s.s0 = u64(prefix + ".s0");
    s.s1 = u64(prefix + ".s1");
    // xoroshiro128++ never leaves the all-zero state: it would draw zeros forever.
    if (s.s0 == 0 && s.s1 == 0) fail(prefix + ".s1", "not zero when " + prefix + ".s0 is zero");
    s.seed = u64(prefix + ".seed");
    s.cached_normal = any_real(prefix + ".cached_normal");
    const std::string& has = text(prefix + ".has_cached");
    if (has != "0" && has != "1") fail(prefix + ".has_cached", "0 or 1");
    s.has_cached = has == "1";
    return s;
  }

 private:
  const io::Metadata& m_;
  const std::string& path_;
};

void put_generator(io::Metadata& m, const std::string& prefix, const Generator::State& s) {
  m[prefix + ".s0"] = std::to_string(s.s0);
  m[prefix + ".s1"] = std::to_string(s.s1);
  m[prefix + ".seed"] = std::to_string(s.seed);
  m[prefix + ".cached_normal"] = real_text(s.cached_normal);
  // A std::string, not a const char*: GCC 12 warns falsely (-Wrestrict) on assigning that.
  m[prefix + ".has_cached"] = std::string(s.has_cached ? "1" : "0");
}

constexpr std::string_view kDropoutPrefix = "dropout_gen.";

[[noreturn]] void mismatch(const std::string& path, const std::string& flag,
                           const std::string& stored, const std::string& given) {
  const bool is_flag = flag.rfind("--", 0) == 0;
  throw Error(ErrorKind::Value, kOp,
              "'" + path + "': " + flag + " is " + stored + " in the checkpoint but " + given +
                  " was given: a resume continues the same run, so the settings that shape it "
                  "must match" +
                  (is_flag ? " (leave " + flag + " out to take the checkpoint's value)" : ""));
}

// Compares (or, when !given(flag), adopts) every setting but the texts, in table order.
void merge(TrainConfig& config, const TrainConfig& stored_in,
           const std::function<bool(std::string_view)>& given, const std::string& path) {
  TrainConfig stored = stored_in;
  for (const IntSetting& s : kInts) {
    if (!given(s.flag)) {
      s.ref(config) = s.ref(stored);
    } else if (!s.may_differ && s.ref(config) != s.ref(stored)) {
      mismatch(path, s.flag, std::to_string(s.ref(stored)), std::to_string(s.ref(config)));
    }
  }
  for (const RealSetting& s : kReals) {
    if (!given(s.flag)) {
      s.ref(config) = s.ref(stored);
    } else if (s.ref(config) != s.ref(stored)) {
      mismatch(path, s.flag, real_text(s.ref(stored)), real_text(s.ref(config)));
    }
  }
  if (!given("--seed")) {
    config.seed = stored.seed;
  } else if (config.seed != stored.seed) {
    mismatch(path, "--seed", std::to_string(stored.seed), std::to_string(config.seed));
  }
  if (!given("--arch")) {
    config.arch = stored.arch;
  } else if (config.arch != stored.arch) {
    mismatch(path, "--arch", stored.arch, config.arch);
  }
  if (!given("--kv-heads")) {
    config.kv_heads = stored.kv_heads;
  } else if (config.arch == "llama" && config.kv_heads != stored.kv_heads) {
    mismatch(path, "--kv-heads", std::to_string(stored.kv_heads), std::to_string(config.kv_heads));
  }
  if (!given("--precision")) {
    config.precision = stored.precision;
  } else if (config.precision != stored.precision) {
    mismatch(path, "--precision", stored.precision, config.precision);
  }
  if (!given("--master-weights")) {
    config.master_weights = stored.master_weights;
  } else if (config.master_weights != stored.master_weights) {
    mismatch(path, "--master-weights", stored.master_weights ? "on" : "off",
             config.master_weights ? "on" : "off");
  }
  if (!given("--loss-scale")) {
    config.init_loss_scale = stored.init_loss_scale;
  } else if (config.precision == "fp16" && config.init_loss_scale != stored.init_loss_scale) {
    mismatch(path, "--loss-scale", real_text(stored.init_loss_scale),
             real_text(config.init_loss_scale));
  }
}

}  // namespace

io::Metadata encode_run_state(const RunState& state) {
  TrainConfig c = state.config;
  io::Metadata m{{"format", "adjoint-gpt"}, {"version", std::to_string(kRunStateVersion)}};
  for (const IntSetting& s : kInts) m[s.key] = std::to_string(s.ref(c));
  for (const RealSetting& s : kReals) m[s.key] = real_text(s.ref(c));
  m["seed"] = std::to_string(c.seed);
  m["checkpoint"] = c.checkpoint;
  // Safetensors metadata must be UTF-8; a path is any bytes. Printable ASCII is always safe,
  // and a path left out only means that a resume needs --data again.
  if (!c.data.empty() && printable_ascii(c.data)) {
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(c.data, ec).lexically_normal();
    m["data.path"] = ec || !printable_ascii(abs.string()) ? c.data : abs.string();
  }
  m["data.bytes"] = std::to_string(state.data.bytes);
  m["data.train_bytes"] = std::to_string(state.data.train_bytes);
  m["data.fnv1a64"] = hex_text(state.data.fnv1a);
  m["step"] = std::to_string(state.step);
  m["threads"] = std::to_string(state.threads);
  m["precision"] = c.precision;
  m["arch"] = c.arch;
  if (c.arch == "llama") m["kv_heads"] = std::to_string(c.kv_heads);
  if (c.master_weights) m["master_weights"] = "1";
  if (c.precision == "fp16") {
    m["grad_scaler.init_scale"] = real_text(c.init_loss_scale);
    m["grad_scaler.scale"] = real_text(state.loss_scale);
    m["grad_scaler.growth_tracker"] = std::to_string(state.scaler_growth_tracker);
    m["skipped_steps"] = std::to_string(state.skipped_steps);
  }
  put_generator(m, "data_gen", state.data_gen);
  for (const auto& [name, g] : state.dropout_gens)
    put_generator(m, std::string(kDropoutPrefix) + name, g);
  return m;
}

nn::GPTConfig decode_model_config(const io::Metadata& metadata, const std::string& path) {
  const Reader r(metadata, path);
  const std::string* format = r.find("format");
  ADJOINT_CHECK(format && *format == "adjoint-gpt", IO, kOp, "'", path,
                "' is not a checkpoint of adjoint-train (its metadata has no 'format' "
                "\"adjoint-gpt\")");
  nn::GPTConfig c;
  c.vocab = r.integer("vocab", 1);
  c.context = r.integer("context", 1);
  c.d_model = r.integer("d_model", 1);
  c.heads = r.integer("heads", 1);
  c.layers = r.integer("layers", 1);
  return c;
}

std::string decode_arch(const io::Metadata& metadata, const std::string& path, int64_t* kv_heads) {
  const Reader r(metadata, path);
  const std::string* arch = r.find("arch");
  if (!arch || *arch == "gpt") return "gpt";  // checkpoints from before --arch: GPTs
  if (*arch != "llama") r.fail("arch", "gpt or llama");
  const int64_t kv = r.integer("kv_heads", 0);
  if (kv_heads) *kv_heads = kv;
  return *arch;
}

RunState decode_run_state(const io::Metadata& metadata, const std::string& path) {
  const Reader r(metadata, path);
  decode_model_config(metadata, path);  // the format check
  const std::string* version = r.find("version");
  ADJOINT_CHECK(version, IO, kOp, "'", path,
                "' was written by an older adjoint-train, which recorded only the model's shape "
                "(no 'version' in its metadata): it cannot be resumed exactly, though "
                "adjoint-sample reads it");
  r.integer("version", kRunStateVersion, kRunStateVersion, " (this adjoint-train's format)");

  RunState s;
  for (const IntSetting& f : kInts) f.ref(s.config) = r.integer(f.key, f.min);
  for (const RealSetting& f : kReals) f.ref(s.config) = r.real(f.key, f.max);
  s.config.seed = r.u64("seed");
  s.config.checkpoint = r.text("checkpoint");
  if (const std::string* p = r.find("data.path")) s.config.data = *p;
  s.data.bytes = r.integer("data.bytes", 1);
  s.data.train_bytes = r.integer("data.train_bytes", 0, s.data.bytes, " (at most data.bytes)");
  s.data.fnv1a = r.hex64("data.fnv1a64");
  s.step = r.integer("step", 0, s.config.steps, " (the run's steps)");
  s.threads = r.integer("threads", 1);
  s.config.arch = decode_arch(metadata, path, &s.config.kv_heads);
  // Checkpoints from before --precision trained in float32.
  if (const std::string* p = r.find("precision")) {
    if (*p != "fp32" && *p != "bf16" && *p != "fp16") r.fail("precision", "fp32, bf16 or fp16");
    s.config.precision = *p;
  }
  if (const std::string* m = r.find("master_weights")) {
    if (*m != "1" || s.config.precision == "fp32")
      r.fail("master_weights", "1, with precision bf16 or fp16");
    s.config.master_weights = true;
  }
  if (s.config.precision == "fp16") {
    s.config.init_loss_scale = r.real("grad_scaler.init_scale", kInf);
    if (!(s.config.init_loss_scale > 0)) r.fail("grad_scaler.init_scale", "a positive scale");
    s.loss_scale = r.real("grad_scaler.scale", kInf);
    if (!(s.loss_scale > 0)) r.fail("grad_scaler.scale", "a positive scale");
    s.scaler_growth_tracker = r.integer("grad_scaler.growth_tracker", 0);
    s.skipped_steps = r.integer("skipped_steps", 0, s.step, " (at most step)");
  }
  s.data_gen = r.generator("data_gen");
  // The batch order's generator is seeded 2 * seed + 1 (Trainer's constructor).
  if (s.data_gen.seed != s.config.seed * 2 + 1)
    r.fail("data_gen.seed", std::to_string(s.config.seed * 2 + 1) + " (2 * seed + 1)");
  for (const auto& [key, value] : metadata) {
    if (key.rfind(kDropoutPrefix, 0) != 0) continue;
    const std::size_t dot = key.rfind('.');
    ADJOINT_CHECK(dot > kDropoutPrefix.size(), IO, kOp, "'", path, "': metadata key '", key,
                  "' is not of the form ", kDropoutPrefix, "<module>.<field>");
    const std::string name = key.substr(kDropoutPrefix.size(), dot - kDropoutPrefix.size());
    if (!s.dropout_gens.count(name))
      s.dropout_gens[name] = r.generator(std::string(kDropoutPrefix) + name);
  }
  return s;
}

RunState read_run_state(const std::string& path) {
  return decode_run_state(io::load_safetensors(path).metadata, path);
}

void check_same_run(const TrainConfig& stored, const TrainConfig& given, const std::string& path) {
  TrainConfig copy = given;
  merge(
      copy, stored, [](std::string_view) { return true; }, path);
}

void check_same_data(const RunState& stored, const DataIdentity& given, const std::string& path) {
  if (stored.data == given) return;
  auto describe = [](const DataIdentity& d) {
    return std::to_string(d.bytes) + " bytes (" + std::to_string(d.train_bytes) +
           " for training, FNV-1a 64 " + hex_text(d.fnv1a) + ")";
  };
  throw Error(ErrorKind::Value, kOp,
              "'" + path + "': --data differs: the checkpoint was trained on " +
                  (stored.config.data.empty() ? std::string("a corpus") : stored.config.data) +
                  " of " + describe(stored.data) + ", but the given corpus has " + describe(given) +
                  "; resume with the same corpus");
}

void adopt_run_config(TrainConfig& config, const TrainConfig& stored,
                      const std::function<bool(std::string_view flag)>& was_given,
                      const std::string& path) {
  TrainConfig merged = config;
  merge(merged, stored, was_given, path);
  TrainConfig stored_copy = stored;
  for (const TextSetting& s : kTexts)
    if (!was_given(s.flag) && !s.ref(stored_copy).empty()) s.ref(merged) = s.ref(stored_copy);
  config = merged;
}

}  // namespace adjoint::tools

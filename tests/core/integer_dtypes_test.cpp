// The narrow integer dtypes (uint8, int8, int16, int32) against independent oracles: promotion
// against "the smallest integer type that holds both ranges", arithmetic against the same loop
// in C++'s own wrapping integer types, reductions and comparisons against loops, conversions
// and file round trips against the values written.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/io/safetensors.h"
#include "adjoint/nn.h"

namespace adjoint {
namespace {

const std::vector<DType> kIntegers = {DType::Bool,  DType::UInt8, DType::Int8,
                                      DType::Int16, DType::Int32, DType::Int64};

struct Range {
  double lo, hi;
};
Range range_of(DType d) {
  switch (d) {
    case DType::Bool:
      return {0, 1};
    case DType::UInt8:
      return {0, 255};
    case DType::Int8:
      return {-128, 127};
    case DType::Int16:
      return {-32768, 32767};
    case DType::Int32:
      return {-2147483648.0, 2147483647.0};
    default:
      return {-0x1p63, 0x1p63 - 1};
  }
}

// The oracle: the smallest of the integer dtypes whose range holds both ranges.
DType smallest_holding(DType a, DType b) {
  const Range ra = range_of(a), rb = range_of(b);
  DType best = DType::Int64;
  for (DType d : kIntegers) {
    const Range r = range_of(d);
    if (r.lo <= std::min(ra.lo, rb.lo) && r.hi >= std::max(ra.hi, rb.hi) &&
        itemsize(d) < itemsize(best))
      best = d;
  }
  return best;
}

TEST(IntegerDTypes, PromotionIsTheSmallestTypeHoldingBoth) {
  for (DType a : kIntegers)
    for (DType b : kIntegers) {
      EXPECT_EQ(promote_types(a, b), smallest_holding(a, b)) << a << " with " << b;
      // Tensors of those dtypes promote the same way in an op.
      const Tensor x = zeros({2}, a), y = zeros({2}, b);
      if (a != DType::Bool || b != DType::Bool) EXPECT_EQ((x + y).dtype(), promote_types(a, b));
    }
  for (DType a : kIntegers)
    for (DType f : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64})
      EXPECT_EQ(promote_types(a, f), f) << a << " with " << f;  // a float holds the category
}

TEST(IntegerDTypes, ScalarsAndZeroDimTensorsKeepTheTensorsIntegerType) {
  const Tensor x = tensor(std::vector<uint8_t>{1, 2, 250});
  EXPECT_EQ((x + 1).dtype(), DType::UInt8);
  EXPECT_EQ((x * scalar_tensor(3, DType::Int64)).dtype(), DType::UInt8);
  EXPECT_EQ((x + 1.5).dtype(), kDefaultFloat);
  EXPECT_EQ((x / x).dtype(), kDefaultFloat);  // true division
  EXPECT_EQ((x * scalar_tensor(2.0, DType::Float64)).dtype(), DType::Float64);
}

template <class T>
std::vector<T> random_values(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(std::numeric_limits<T>::min(),
                                              std::numeric_limits<T>::max());
  std::vector<T> v(n);
  for (T& e : v) e = static_cast<T>(dist(rng));
  return v;
}

// Sum, difference and product against C++'s own narrow types, which wrap modulo 2^bits (the
// int64 result converted to T, defined since C++20), as PyTorch's integer kernels do.
template <class T>
void check_wrapping_arithmetic() {
  const std::vector<T> a = random_values<T>(37, 1), b = random_values<T>(37, 2);
  const Tensor ta = tensor(a), tb = tensor(b);
  ASSERT_EQ(ta.dtype(), dtype_of_v<T>);
  const std::vector<T> sum = (ta + tb).template to_vector<T>();
  const std::vector<T> diff = (ta - tb).template to_vector<T>();
  const std::vector<T> prod = (ta * tb).template to_vector<T>();
  const std::vector<T> twice = (ta * 2).template to_vector<T>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const int64_t x = a[i], y = b[i];
    EXPECT_EQ(sum[i], static_cast<T>(x + y)) << i;
    EXPECT_EQ(diff[i], static_cast<T>(x - y)) << i;
    EXPECT_EQ(prod[i], static_cast<T>(x * y)) << i;
    EXPECT_EQ(twice[i], static_cast<T>(x * 2)) << i;
  }
}

TEST(IntegerDTypes, ArithmeticWrapsAsTheNarrowType) {
  check_wrapping_arithmetic<uint8_t>();
  check_wrapping_arithmetic<int8_t>();
  check_wrapping_arithmetic<int16_t>();
  check_wrapping_arithmetic<int32_t>();
}

TEST(IntegerDTypes, InPlaceArithmeticWrapsToo) {
  std::vector<uint8_t> a = random_values<uint8_t>(19, 3);
  const std::vector<uint8_t> b = random_values<uint8_t>(19, 4);
  Tensor t = tensor(a);
  t.add_(tensor(b));
  t.mul_(3);
  const std::vector<uint8_t> got = t.to_vector<uint8_t>();
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(got[i], static_cast<uint8_t>((int64_t{a[i]} + b[i]) * 3)) << i;
}

TEST(IntegerDTypes, ComparisonsCompareThePromotedValues) {
  // 200 as uint8 against -1 as int8: compared as int16, as PyTorch does.
  const std::vector<uint8_t> u = random_values<uint8_t>(41, 5);
  const std::vector<int8_t> s = random_values<int8_t>(41, 6);
  const Tensor tu = tensor(u), ts = tensor(s);
  const std::vector<bool> gt_ = gt(tu, ts).to_vector<bool>();
  const std::vector<bool> eq_ = eq(tu, ts).to_vector<bool>();
  const std::vector<bool> lt7 = lt(tu, 7).to_vector<bool>();
  for (std::size_t i = 0; i < u.size(); ++i) {
    EXPECT_EQ(gt_[i], int{u[i]} > int{s[i]}) << i;
    EXPECT_EQ(eq_[i], int{u[i]} == int{s[i]}) << i;
    EXPECT_EQ(lt7[i], u[i] < 7) << i;
  }
}

TEST(IntegerDTypes, SumIsInt64AndMaxKeepsTheType) {
  const std::vector<uint8_t> u = random_values<uint8_t>(300, 7);
  const Tensor t = tensor(u, Shape{3, 100});
  const Tensor s = sum(t, {1});
  EXPECT_EQ(s.dtype(), DType::Int64);
  const std::vector<int64_t> got = s.to_vector<int64_t>();
  for (int r = 0; r < 3; ++r) {
    int64_t expect = 0;
    for (int c = 0; c < 100; ++c) expect += u[static_cast<std::size_t>(r * 100 + c)];
    EXPECT_EQ(got[static_cast<std::size_t>(r)], expect);  // 100 * 255 is past uint8, not int64
  }
  const std::vector<int8_t> s8 = random_values<int8_t>(50, 8);
  const Tensor m = max(tensor(s8));
  EXPECT_EQ(m.dtype(), DType::Int8);
  EXPECT_EQ(m.item<int8_t>(), *std::max_element(s8.begin(), s8.end()));
  EXPECT_EQ(argmax(tensor(s8)).item<int64_t>(),
            std::max_element(s8.begin(), s8.end()) - s8.begin());
}

TEST(IntegerDTypes, EmptyTensorsAndStridedViews) {
  EXPECT_EQ(sum(zeros({0}, DType::UInt8)).item<int64_t>(), 0);
  EXPECT_EQ((zeros({0, 3}, DType::Int8) + 1).shape(), (Shape{0, 3}));
  // A transposed int16 view plus a broadcast row, against the loop over the same elements.
  const std::vector<int16_t> v = random_values<int16_t>(12, 15), r = random_values<int16_t>(3, 16);
  const Tensor t = tensor(v, Shape{4, 3}).transpose(0, 1);  // [3, 4], strides (1, 3)
  const std::vector<int16_t> got = (t + tensor(r, Shape{3, 1})).contiguous().to_vector<int16_t>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(got[static_cast<std::size_t>(i * 4 + j)],
                static_cast<int16_t>(int64_t{v[static_cast<std::size_t>(j * 3 + i)]} +
                                     r[static_cast<std::size_t>(i)]));
}

TEST(IntegerDTypes, ConversionsRoundTripAndWrapLikeInt64) {
  const std::vector<int16_t> v = random_values<int16_t>(23, 9);
  const Tensor t = tensor(v);
  EXPECT_EQ(t.to(DType::Float32).to(DType::Int16).to_vector<int16_t>(), v);  // exact in float32
  EXPECT_EQ(t.to(DType::Int64).to(DType::Int16).to_vector<int16_t>(), v);
  // Into a narrower type, through int64: truncated toward zero, then wrapped.
  const Tensor f = tensor({-1.0, 255.9, 256.0, -129.5, 3.7});
  const std::vector<uint8_t> as_u8 = f.to(DType::UInt8).to_vector<uint8_t>();
  const std::vector<double> fv = f.to_vector<double>();
  for (std::size_t i = 0; i < fv.size(); ++i)
    EXPECT_EQ(as_u8[i], static_cast<uint8_t>(static_cast<int64_t>(fv[i]))) << fv[i];
  EXPECT_EQ(tensor(std::vector<int32_t>{-7}).item<uint8_t>(), static_cast<uint8_t>(-7));
}

TEST(IntegerDTypes, FillRefusesValuesTheTypeCannotHold) {
  Tensor t = zeros({3}, DType::UInt8);
  t.fill_(255);
  EXPECT_EQ(t.to_vector<uint8_t>(), (std::vector<uint8_t>{255, 255, 255}));
  try {
    t.fill_(256);
    FAIL() << "fill_(256) on uint8 did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("uint8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fill_"), std::string::npos) << e.what();
  }
  EXPECT_THROW(full({2}, -1, DType::UInt8), Error);
  EXPECT_THROW(full({2}, 128, DType::Int8), Error);
  EXPECT_EQ(full({2}, -128, DType::Int8).to_vector<int8_t>(), (std::vector<int8_t>{-128, -128}));
}

TEST(IntegerDTypes, IntVectorsMakeInt32TensorsAsLibtorch) {
  const Tensor t = tensor(std::vector<int>{1, -2, 3});
  EXPECT_EQ(t.dtype(), DType::Int32);
  EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(itemsize(DType::Int32), 4u);
  EXPECT_EQ(tensor(std::vector<uint8_t>{7}).dtype(), DType::UInt8);
}

TEST(IntegerDTypes, IndexingMovesNarrowValues) {
  const std::vector<uint8_t> img = random_values<uint8_t>(12, 10);
  const Tensor x = tensor(img, Shape{3, 4});
  const Tensor rows = index_select(x, 0, tensor(std::vector<int64_t>{2, 0}));
  EXPECT_EQ(rows.dtype(), DType::UInt8);
  const std::vector<uint8_t> got = rows.to_vector<uint8_t>();
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(got[static_cast<std::size_t>(c)], img[static_cast<std::size_t>(8 + c)]);
    EXPECT_EQ(got[static_cast<std::size_t>(4 + c)], img[static_cast<std::size_t>(c)]);
  }
  // A view's elements, read through its strides.
  const std::vector<uint8_t> col = x.transpose(0, 1).contiguous().to_vector<uint8_t>();
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c)
      EXPECT_EQ(col[static_cast<std::size_t>(c * 3 + r)], img[static_cast<std::size_t>(r * 4 + c)]);
  const Tensor both = cat({x, rows});
  EXPECT_EQ(both.dtype(), DType::UInt8);
  const std::vector<uint8_t> joined = both.to_vector<uint8_t>();
  for (std::size_t i = 0; i < img.size(); ++i) EXPECT_EQ(joined[i], img[i]);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(joined[img.size() + i], got[i]);
  const Tensor chosen = where(gt(x, 100), x, tensor(std::vector<uint8_t>{0}));
  const std::vector<uint8_t> w = chosen.to_vector<uint8_t>();
  for (std::size_t i = 0; i < img.size(); ++i) EXPECT_EQ(w[i], img[i] > 100 ? img[i] : 0);
}

TEST(IntegerDTypes, EmbeddingTakesInt32TokenIds) {
  nn::Embedding emb(10, 3);
  const Tensor ids32 = tensor(std::vector<int32_t>{4, 1, 9});
  const Tensor ids64 = ids32.to(DType::Int64);
  EXPECT_EQ(emb(ids32).to_vector<float>(), emb(ids64).to_vector<float>());
}

TEST(IntegerDTypes, IntegerTensorsCannotRequireGrad) {
  Tensor t = zeros({2}, DType::Int16);
  EXPECT_THROW(t.requires_grad_(true), Error);
}

TEST(IntegerDTypes, PrintShowsNumbersNotCharacters) {
  std::ostringstream os;
  os << tensor(std::vector<uint8_t>{0, 65, 255});
  const std::string s = os.str();
  EXPECT_NE(s.find("65"), std::string::npos) << s;
  EXPECT_NE(s.find("255"), std::string::npos) << s;
  EXPECT_NE(s.find("uint8"), std::string::npos) << s;
}

TEST(IntegerDTypes, SafetensorsRoundTripEachIntegerType) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "adjoint_integer_dtypes.safetensors").string();
  io::NamedTensors saved = {{"u8", tensor(random_values<uint8_t>(5, 11))},
                            {"i8", tensor(random_values<int8_t>(6, 12))},
                            {"i16", tensor(random_values<int16_t>(7, 13))},
                            {"i32", tensor(random_values<int32_t>(8, 14), Shape{2, 4})}};
  io::save_safetensors(path, saved);
  const io::SafetensorsFile loaded = io::load_safetensors(path);
  std::filesystem::remove(path);
  ASSERT_EQ(loaded.tensors.size(), saved.size());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    const Tensor& a = saved[i].second;
    const Tensor& b = loaded.tensors[i].second;
    EXPECT_EQ(loaded.tensors[i].first, saved[i].first);
    EXPECT_EQ(b.dtype(), a.dtype()) << saved[i].first;
    EXPECT_EQ(b.shape(), a.shape()) << saved[i].first;
    EXPECT_EQ(a.to_vector<int64_t>(), b.to_vector<int64_t>()) << saved[i].first;
  }
}

TEST(IntegerDTypes, MetaTensorsInferTheIntegerDTypes) {
  const Tensor x = zeros({4, 5}, TensorOptions(DType::UInt8).device(kMeta));
  EXPECT_EQ((x + 1).dtype(), DType::UInt8);
  EXPECT_EQ(sum(x, {1}).dtype(), DType::Int64);
  EXPECT_EQ((x + zeros({5}, TensorOptions(DType::Int8).device(kMeta))).dtype(), DType::Int16);
  EXPECT_EQ(x.to(DType::Int32).dtype(), DType::Int32);
  EXPECT_TRUE((x + 1).is_meta());
}

}  // namespace
}  // namespace adjoint

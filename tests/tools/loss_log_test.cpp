// loss.csv (tools/loss_log.h): rows reach the file as they are written (a killed run keeps
// them), the format is the one adjoint-train always wrote, and a resume keeps the rows up to
// the checkpoint's step, dropping the later ones and a row cut short, so that no step is
// logged twice.
#include <gtest/gtest.h>

#include "io/io_test_util.h"
#include "loss_log.h"

namespace {

using adjoint::io_test::read_bytes;
using adjoint::io_test::TempDir;
using adjoint::io_test::write_bytes;
using adjoint::tools::LossLog;

TEST(LossLog, RowsReachTheFileAsTheyAreWritten) {
  TempDir dir;
  const std::string path = dir.file("loss.csv");
  LossLog log = LossLog::create(path);
  EXPECT_EQ(read_bytes(path), "step,train_loss,val_loss\n");
  log.append(1, 5.5451234, std::nullopt);
  log.append(10, 3.75725123, 4.0801056);
  // Read while the log is still open: nothing waits in a buffer.
  EXPECT_EQ(read_bytes(path), "step,train_loss,val_loss\n1,5.54512,\n10,3.75725,4.080106\n");
}

TEST(LossLog, ResumeDropsTheRowsPastTheCheckpoint) {
  TempDir dir;
  const std::string path = dir.file("loss.csv");
  // Killed at step 4 with a checkpoint at step 2, in the middle of writing row 5.
  write_bytes(path, "step,train_loss,val_loss\n1,5.5,\n2,5.4,5.300000\n3,5.3,\n4,5.2,\n5,5.");
  LossLog log = LossLog::resume(path, 2);
  EXPECT_EQ(read_bytes(path), "step,train_loss,val_loss\n1,5.5,\n2,5.4,5.300000\n");
  ASSERT_EQ(log.kept().size(), 2u);
  EXPECT_EQ(log.kept()[1].step, 2);
  EXPECT_EQ(log.kept()[1].train_loss, 5.4);
  EXPECT_EQ(log.kept()[1].val_loss, 5.3);
  EXPECT_FALSE(log.kept()[0].val_loss);
  EXPECT_NE(log.note().find("dropped what followed step 2"), std::string::npos) << log.note();
  log.append(3, 5.25, std::nullopt);
  EXPECT_EQ(read_bytes(path), "step,train_loss,val_loss\n1,5.5,\n2,5.4,5.300000\n3,5.25,\n");
}

TEST(LossLog, ResumeAtTheLastRowKeepsEverything) {
  TempDir dir;
  const std::string path = dir.file("loss.csv");
  const std::string text = "step,train_loss,val_loss\n1,5.5,\n2,5.4,5.300000\n";
  write_bytes(path, text);
  LossLog log = LossLog::resume(path, 2);
  EXPECT_EQ(read_bytes(path), text);
  EXPECT_EQ(log.note(), "");
}

TEST(LossLog, ResumeWithoutALogStartsOne) {
  TempDir dir;
  const std::string path = dir.file("loss.csv");
  LossLog missing = LossLog::resume(path, 7);  // e.g. resumed into another --out
  EXPECT_EQ(read_bytes(path), "step,train_loss,val_loss\n");
  EXPECT_TRUE(missing.kept().empty());
  // Rows up to step 1 only: kept, and the gap is reported.
  write_bytes(path, "step,train_loss,val_loss\n1,5.5,\n");
  LossLog short_log = LossLog::resume(path, 3);
  EXPECT_NE(short_log.note().find("rows up to step 1 only"), std::string::npos);
  // Not a loss log: replaced, with a note.
  write_bytes(path, "something else\n1,2,3\n");
  LossLog other = LossLog::resume(path, 3);
  EXPECT_EQ(read_bytes(path), "step,train_loss,val_loss\n");
  EXPECT_NE(other.note().find("not a loss log"), std::string::npos);
}

}  // namespace

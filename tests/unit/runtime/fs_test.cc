#include "runtime/fs.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "tests/testing/process.h"

namespace mycel {
namespace {

TEST_CASE("directory and file calls keep the errno's meaning") {
  testing::TempDir dir;
  const std::string sub = dir.Sub("d");
  REQUIRE(MakeDir(sub, 0700).ok());
  CHECK(absl::IsAlreadyExists(MakeDir(sub, 0700)));
  CHECK(absl::IsNotFound(RemoveFile(dir.Sub("none"))));
  CHECK(absl::IsNotFound(Rename(dir.Sub("none"), dir.Sub("other"))));
  CHECK(absl::IsNotFound(ListDir(dir.Sub("none")).status()));

  REQUIRE(WriteFile(sub + "/a", "x").ok());
  REQUIRE(Rename(sub + "/a", sub + "/b").ok());
  absl::StatusOr<std::vector<std::string>> names = ListDir(sub);
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"b"});

  absl::Status busy = RemoveDir(sub);
  CHECK_FALSE(busy.ok());
  CHECK(busy.message().find("rmdir " + sub) != absl::string_view::npos);
  REQUIRE(RemoveFile(sub + "/b").ok());
  REQUIRE(RemoveDir(sub).ok());
  CHECK(absl::IsNotFound(Stat(sub).status()));
}

TEST_CASE("OpenFile, StatFd, WriteAll and Truncate") {
  testing::TempDir dir;
  const std::string path = dir.Sub("f");
  absl::StatusOr<UniqueFd> fd =
      OpenFile(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  REQUIRE(fd.ok());
  CHECK(absl::IsAlreadyExists(
      OpenFile(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600).status()));
  CHECK(absl::IsNotFound(OpenFile(dir.Sub("none"), O_RDONLY).status()));
  REQUIRE(WriteAll(fd->get(), "hello\n", path).ok());
  absl::StatusOr<FileInfo> st = StatFd(fd->get(), path);
  REQUIRE(st.ok());
  CHECK(st->is_regular());
  CHECK(st->size == 6);
  REQUIRE(Truncate(fd->get(), 2, path).ok());
  CHECK(*ReadFile(path) == "he");
  CHECK(CanAccess(path, R_OK | W_OK));
  CHECK_FALSE(CanAccess(dir.Sub("none"), F_OK));
}

TEST_CASE("ReadLink reads a link's target and says why it cannot") {
  testing::TempDir dir;
  const std::string link = dir.Sub("l");
  REQUIRE(symlink("some/target", link.c_str()) == 0);
  absl::StatusOr<std::string> target = ReadLink(link);
  REQUIRE(target.ok());
  CHECK(*target == "some/target");
  CHECK(absl::IsNotFound(ReadLink(dir.Sub("none")).status()));
  REQUIRE(WriteFile(dir.Sub("f"), "x").ok());
  CHECK(absl::IsInvalidArgument(ReadLink(dir.Sub("f")).status()));  // EINVAL
}

TEST_CASE("SetXattr and GetXattr round trip on an open file") {
  testing::TempDir dir;
  const std::string path = dir.Sub("f");
  absl::StatusOr<UniqueFd> fd =
      OpenFile(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  REQUIRE(fd.ok());
  constexpr char kName[] = "user.mycel.test";
  absl::Status set = SetXattr(fd->get(), kName, "12345");
  if (absl::IsUnimplemented(set)) {  // EOPNOTSUPP
    MESSAGE("skipped: the filesystem of ", path,
            " has no user xattrs: ", set.ToString());
    return;
  }
  REQUIRE(set.ok());
  CHECK(set.message().empty());
  absl::StatusOr<std::string> got = GetXattr(fd->get(), kName, 32);
  REQUIRE(got.ok());
  CHECK(*got == "12345");
  // Larger than asked for: ERANGE, not a cut value.
  CHECK_FALSE(GetXattr(fd->get(), kName, 3).ok());
  CHECK_FALSE(GetXattr(fd->get(), "user.mycel.none", 32).ok());
  REQUIRE(SetXattr(fd->get(), kName, "").ok());
  got = GetXattr(fd->get(), kName, 32);
  REQUIRE(got.ok());
  CHECK(got->empty());
  absl::Status bad = SetXattr(-1, kName, "1");
  CHECK(bad.message().find(std::string("set ") + kName) !=
        absl::string_view::npos);
}

}  // namespace
}  // namespace mycel

// The main of every test binary: the binary's requirements
// (tests/testing/requires.h), then doctest.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <stdio.h>

#include <string>

#include "tests/testing/requires.h"

int main(int argc, char** argv) {
  if (std::string why = mycel::testing::UnmetRequirement(); !why.empty()) {
    // Exit code 77 is ctest's SKIP_RETURN_CODE for every mycel_test.
    fprintf(stderr, "skipped: %s\n", why.c_str());
    return 77;
  }
  return doctest::Context(argc, argv).run();
}

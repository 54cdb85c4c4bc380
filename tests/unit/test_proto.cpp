#include <gtest/gtest.h>
// placeholder: replaced by the proto tests
TEST(Placeholder, Builds) { SUCCEED(); }

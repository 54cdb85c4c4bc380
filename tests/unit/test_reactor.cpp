#include <gtest/gtest.h>
// placeholder: replaced by the reactor tests
TEST(Placeholder, Builds) { SUCCEED(); }

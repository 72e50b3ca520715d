#include <gtest/gtest.h>
TEST(VerbsUnit, Placeholder) {}

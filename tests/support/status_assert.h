// Opening something in a test (a context, a publisher, a segment...) that returns an
// absl::StatusOr: POLLUX_ASSERT_OK_DECL(sub, ctx->subscriber("md")) declares `sub` as that
// StatusOr and fails the test at once, with the status, when it is not ok. Statement use only
// (it expands to a declaration and an assertion), in a function returning void.
#pragma once

#include <gtest/gtest.h>

#define POLLUX_ASSERT_OK_DECL(var, expr) \
  auto var = (expr);                     \
  ASSERT_TRUE(var.ok()) << var.status()

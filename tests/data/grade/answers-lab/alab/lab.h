#pragma once
// A test lab (tests/grade_test.sh): one function and an answers file.
#include "labs/common/harness.h"

int twice(int x);

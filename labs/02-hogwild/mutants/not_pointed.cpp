// mutant: share_memory copies the weights into the segment but never points the model at them
//   (ParamLayout::point forgotten): the model keeps its private parameters, every worker trains
//   the copy fork gave it, and the segment holds the initial weights for ever
// caught-by: shared
// The reference solution with its layout.point(model, base) call made a no-op (the macro).
#include "lab.h"
#define point(model, base) bytes()
#include "labs/02-hogwild/solution/hogwild.cpp"

/* Embeds Strata from C: generate, compile with a strategy, read back, and
 * the error paths. Prints "N passed, N failed". */

#include "strata-c/Strata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

static void check(int ok, const char *what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    printf("FAIL: %s\n", what);
  }
}

typedef struct {
  char *data;
  size_t size;
} Buffer;

static void append(const char *data, size_t length, void *user) {
  Buffer *b = (Buffer *)user;
  b->data = realloc(b->data, b->size + length + 1);
  memcpy(b->data + b->size, data, length);
  b->size += length;
  b->data[b->size] = 0;
}

/* Whether the session's program, printed, contains `text`. */
static int programContains(StrataSession s, const char *text) {
  Buffer b = {NULL, 0};
  strataSessionPrintProgram(s, append, &b);
  int found = b.data && strstr(b.data, text) != NULL;
  free(b.data);
  return found;
}

int main(int argc, char **argv) {
  const char *strategyPath = argc > 1 ? argv[1] : NULL;
  StrataSession s = strataSessionCreate();
  check(s != NULL, "create");

  check(strataSessionGenerateGpt(s, 1, 16, 2, 8, 64, 2, 0.1) == 0, "generate");
  check(strataSessionRunPipeline(s, "strata-autodiff,strata-optimizer") == 0,
        "pipeline");
  Buffer out = {NULL, 0};
  check(strataSessionPrintProgram(s, append, &out) == 0, "print");
  check(out.data && strstr(out.data, "strata.adamw_update") != NULL,
        "optimizer ran");
  check(out.data && strstr(out.data, "strata.state @step") != NULL,
        "state declared");

  /* The same pipeline anchored on the module, as mlir-opt spells it. */
  check(strataSessionGenerateGpt(s, 1, 16, 2, 8, 64, 2, 0.1) == 0,
        "generate for the anchored pipeline");
  check(strataSessionRunPipeline(
            s, "builtin.module(strata-autodiff,strata-optimizer{type=sgd})") ==
            0,
        "anchored pipeline");
  check(programContains(s, "strata.sgd_update"), "anchored pipeline ran");

  /* The printed program parses back. */
  check(strataSessionParseProgram(s, out.data, out.size, "roundtrip") == 0,
        "reparse");

  /* Errors carry locations and messages. */
  const char *bad = "func.func @f() {\n  %0 = strata.bogus\n}\n";
  check(strataSessionParseProgram(s, bad, strlen(bad), "bad.mlir") != 0,
        "bad program fails");
  check(strstr(strataSessionLastError(s), "bad.mlir:2") != NULL,
        "error names the line");
  check(strataSessionRunPipeline(s, "strata-no-such-pass") != 0,
        "unknown pass fails");
  check(strataSessionGenerateGpt(s, 1, 30, 4, 8, 64, 2, 0.0) != 0,
        "invalid model fails");
  check(strstr(strataSessionLastError(s), "divisible") != NULL,
        "model error text");

  if (strategyPath) {
    check(strataSessionGenerateGpt(s, 1, 16, 2, 8, 64, 2, 0.1) == 0,
          "generate again");
    check(strataSessionApplyStrategy(s, strategyPath, 0) == 0,
          "apply strategy");
    check(programContains(s, "strata.fused_gemm_epilogue"),
          "strategy fused the GEMMs");
  }
  check(strataSessionApplyStrategy(s, "/nonexistent.yaml", 0) != 0,
        "missing strategy fails");
  check(strstr(strataSessionLastError(s), "/nonexistent.yaml") != NULL,
        "strategy error names the file");

  free(out.data);
  strataSessionDestroy(s);
  printf("capi: %d passed, %d failed\n", passed, failed);
  return failed != 0;
}

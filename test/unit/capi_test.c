/* Embeds Strata from C: generate, compile with a strategy, read back, and
 * the error paths. Prints "N passed, N failed". */

#include "strata-c/Strata.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Whether the session's last error contains `text`. */
static int errorSays(StrataSession s, const char *text) {
  return strstr(strataSessionLastError(s), text) != NULL;
}

/* Whether the session's program, printed, contains `text`. */
static int programContains(StrataSession s, const char *text) {
  Buffer b = {NULL, 0};
  strataSessionPrintProgram(s, append, &b);
  int found = b.data && strstr(b.data, text) != NULL;
  free(b.data);
  return found;
}

typedef struct {
  int errors;
  char location[256];
} Seen;

static void onDiagnostic(StrataDiagnosticSeverity severity,
                         const char *location, const char *message,
                         void *user) {
  Seen *seen = (Seen *)user;
  (void)message;
  if (severity == STRATA_DIAGNOSTIC_ERROR) {
    ++seen->errors;
    snprintf(seen->location, sizeof(seen->location), "%s", location);
  }
}

/* Executables: what a framework gets wrong is refused with a message. */
static void executableErrors(void) {
  StrataSession s = strataSessionCreate();
  StrataExecutableOptions options;
  StrataExecutable exe = NULL;
  strataExecutableOptionsInit(&options);
  check(options.collectiveTimeout == 1800, "the collective timeout's default");

  /* A world size that no job has. */
  check(strataSessionApplyStrategy(s, "/nonexistent.yaml", -5, 0) != 0,
        "negative world size refused");
  check(errorSays(s, "world size -5"), "the error names the world size");

  /* No program yet: the empty module has no step. */
  check(strataExecutableCreate(s, &options, &exe) != 0 && exe == NULL,
        "no step function fails");
  check(errorSays(s, "@train_step"), "the error names the step function");

  check(strataSessionGenerateGpt(s, 1, 16, 2, 8, 64, 2, 0.0) == 0,
        "generate for executables");
  /* The CUDA backend runs where a GPU is; elsewhere it is refused with why
     (no device, or a build without the CUDA runtime). */
  options.backend = "cuda";
  if (strataExecutableCreate(s, &options, &exe) == 0) {
    strataExecutableDestroy(exe);
    exe = NULL;
  } else {
    check(errorSays(s, "CUDA runtime"), "cuda error text");
  }
  options.backend = "tpu";
  check(strataExecutableCreate(s, &options, &exe) != 0, "unknown backend");
  check(errorSays(s, "expected cpu, cuda or reference"),
        "unknown backend text");
  options.backend = "cpu";
  options.worldSize = 2;
  check(strataExecutableCreate(s, &options, &exe) != 0,
        "two ranks without MPI refused");
  check(errorSays(s, "MPI_Comm"), "the error asks for the communicator");
  options.worldSize = 1;
  options.rank = 1;
  check(strataExecutableCreate(s, &options, &exe) != 0, "rank 1 of 1");
  options.rank = 0;
  options.size = 8;
  check(strataExecutableCreate(s, &options, &exe) != 0, "short options");
  check(errorSays(s, "strataExecutableOptionsInit"), "short options text");
  options.size = sizeof(options);

  check(strataExecutableCreate(s, &options, &exe) == 0 && exe != NULL,
        "create");
  check(strataExecutableNumInputs(exe) == 2, "two inputs");
  StrataTensorInfo info;
  check(strataExecutableInputInfo(exe, 0, &info) == 0 &&
            strcmp(info.name, "tokens") == 0 && info.rank == 2 &&
            info.shape[0] == 2 && info.shape[1] == 8,
        "tokens info");
  check(strataExecutableInputInfo(exe, 2, &info) != 0, "input 2 refused");
  /* Token ids beyond the vocabulary of 64 (the licence texts are bytes). */
  int32_t tokens[16], targets[16];
  void *batch[2] = {tokens, targets};
  check(strataExecutableReadBatch(exe, NULL, STRATA_DATA_TEXT, 0, batch) != 0,
        "data outside the vocabulary refused");
  check(errorSays(s, "vocabulary of 64"), "vocabulary text");
  check(strataExecutableReadBatch(exe, "", STRATA_DATA_TEXT, 0, batch) != 0 &&
            errorSays(s, "data path is empty"),
        "an empty data path refused");
  /* A file of uint16 token ids 0, 1, ..., 60, 0, 1, ...: every target is
     the id after its token. Read as uint32, two ids make one beyond the
     vocabulary; read as text, its .bin name is refused. */
  {
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/strata-capi-XXXXXX.bin",
             tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemps(path, 4);
    check(fd >= 0, "temporary token file");
    uint16_t ids[400];
    for (int k = 0; k < 400; ++k)
      ids[k] = (uint16_t)(k % 61);
    check(fd >= 0 && write(fd, ids, sizeof(ids)) == (ssize_t)sizeof(ids),
          "token file written");
    if (fd >= 0)
      close(fd);
    check(strataExecutableReadBatch(exe, path, STRATA_DATA_UINT16, 3, batch) ==
              0,
          "uint16 ids read");
    int consistent = 1;
    for (int i = 0; i < 16; ++i)
      consistent &= tokens[i] >= 0 && tokens[i] < 61 &&
                    targets[i] == (tokens[i] + 1) % 61 &&
                    (i % 8 == 7 || tokens[i + 1] == targets[i]);
    check(consistent, "uint16 tokens and their targets");
    check(strataExecutableReadBatch(exe, path, STRATA_DATA_UINT32, 3, batch) !=
                  0 &&
              errorSays(s, "outside the program's vocabulary of 64"),
          "the same file as uint32 ids is refused");
    check(strataExecutableReadBatch(exe, path, STRATA_DATA_TEXT, 3, batch) !=
                  0 &&
              errorSays(s, "looks like a file of token ids: give the data "
                           "format uint16 or uint32"),
          "a .bin file read as text refused");
    check(strataExecutableReadBatch(exe, path, 7, 3, batch) != 0 &&
              errorSays(s, "data format 7 is none of"),
          "an unknown data format refused");
    unlink(path);
    strcat(path, ".missing");
    check(strataExecutableReadBatch(exe, path, STRATA_DATA_UINT16, 3, batch) !=
                  0 &&
              errorSays(s, "data path ") && errorSays(s, " does not exist"),
          "a missing data file named as the data path");
  }
  for (int i = 0; i < 16; ++i)
    tokens[i] = targets[i] = i;
  double loss = 0;
  check(strataExecutableStep(exe, (const void *const *)batch, &loss) == 0 &&
            loss > 3.0 && loss < 5.0,
        "one step near ln(64)");
  check(strcmp(strataSessionLastError(s), "") == 0,
        "no error after a call that succeeded");
  int64_t done = 0;
  check(strataExecutableLoadCheckpoint(exe, "/nonexistent.safetensors",
                                       &done) != 0,
        "missing checkpoint fails");
  check(errorSays(s, "/nonexistent.safetensors"),
        "checkpoint error names the file");
  StrataMemoryPlan plan;
  check(strataExecutableMemoryPlan(exe, &plan) == 0 && plan.peak > 0 &&
            plan.peak == plan.arena + plan.persistent + plan.inputs,
        "memory plan");

  /* NULL where a pointer is needed: an error naming it, nothing done (the
     step with no address for its loss does not train). */
  check(strataExecutableStep(exe, NULL, &loss) != 0 &&
            errorSays(s, "the array of input buffers is NULL"),
        "step without inputs refused");
  void *half[2] = {tokens, NULL};
  check(strataExecutableStep(exe, (const void *const *)half, &loss) != 0 &&
            errorSays(s, "the buffer of input 'targets' is NULL"),
        "step with a NULL input buffer refused");
  check(strataExecutableStep(exe, (const void *const *)batch, NULL) != 0 &&
            errorSays(s, "the loss's address is NULL"),
        "step without a loss address refused");
  check(strataExecutableReadBatch(exe, NULL, STRATA_DATA_TEXT, 0, NULL) != 0 &&
            errorSays(s, "the array of input buffers is NULL"),
        "read batch without buffers refused");
  check(strataExecutableInputInfo(exe, 0, NULL) != 0 &&
            errorSays(s, "the tensor info's address is NULL"),
        "input info without info refused");
  check(strataExecutableMemoryPlan(exe, NULL) != 0 &&
            errorSays(s, "the memory plan's address is NULL"),
        "memory plan without plan refused");
  check(strataExecutableLoadCheckpoint(exe, NULL, &done) != 0 &&
            errorSays(s, "the checkpoint path is NULL"),
        "load without a path refused");
  check(strataExecutableSaveCheckpoint(exe, NULL, 1) != 0 &&
            errorSays(s, "the checkpoint path is NULL"),
        "save without a path refused");
  /* Still trains: the refusals changed nothing. */
  check(strataExecutableStep(exe, (const void *const *)batch, &loss) == 0,
        "a step after the refusals");
  strataExecutableDestroy(exe);
  StrataExecutable none = NULL;
  check(strataExecutableCreate(s, NULL, &none) != 0 && none == NULL &&
            errorSays(s, "the options pointer is NULL"),
        "create without options refused");
  check(strataExecutableCreate(s, &options, NULL) != 0 &&
            errorSays(s, "the executable's address is NULL"),
        "create without a result address refused");
  check(strataSessionParseProgram(s, NULL, 5, "x.mlir") != 0 &&
            errorSays(s, "the program text is NULL"),
        "parse without text refused");
  check(strataSessionRunPipeline(s, NULL) != 0 &&
            errorSays(s, "the pass pipeline is NULL"),
        "pipeline NULL refused");
  check(strataSessionApplyStrategy(s, NULL, 1, 0) != 0 &&
            errorSays(s, "the strategy path is NULL"),
        "strategy path NULL refused");
  check(strataSessionPrintProgram(s, NULL, NULL) != 0 &&
            errorSays(s, "the callback is NULL"),
        "print without a callback refused");
  /* NULL handles fail with nothing to report in. */
  check(strataSessionParseProgram(NULL, "x", 1, "x") != 0 &&
            strataSessionRunPipeline(NULL, "strata-autodiff") != 0 &&
            strataExecutableCreate(NULL, &options, &none) != 0 &&
            none == NULL && strataExecutableNumInputs(NULL) == -1 &&
            strataExecutableStep(NULL, (const void *const *)batch, &loss) !=
                0 &&
            strataExecutableMemoryPlan(NULL, &plan) != 0 &&
            strcmp(strataSessionLastError(NULL), "the session is NULL") == 0,
        "NULL handles refused");

  /* Diagnostics through the callback, with their location. */
  Seen seen = {0, ""};
  strataSessionSetDiagnosticCallback(s, onDiagnostic, &seen);
  const char *bad = "func.func @f() {\n  %0 = strata.bogus\n}\n";
  check(strataSessionParseProgram(s, bad, strlen(bad), "cb.mlir") != 0,
        "bad program for the callback");
  check(seen.errors == 1 && strcmp(seen.location, "cb.mlir:2:8") == 0,
        "the callback got the error and its location");
  check(strataSessionApplyStrategy(s, "/nonexistent.yaml", 2, 2) != 0,
        "rank 2 of 2 refused");
  check(seen.errors == 2, "the callback got the strategy error");
  strataSessionDestroy(s);
}

/* A session destroyed before its executable lives on until the executable
   is destroyed: the executable still trains and reports. */
static void sessionFirst(void) {
  StrataSession s = strataSessionCreate();
  StrataExecutableOptions options;
  strataExecutableOptionsInit(&options);
  StrataExecutable exe = NULL;
  check(strataSessionGenerateGpt(s, 1, 16, 2, 8, 256, 2, 0.0) == 0 &&
            strataExecutableCreate(s, &options, &exe) == 0,
        "an executable to outlive its session");
  Seen seen = {0, ""};
  strataSessionSetDiagnosticCallback(s, onDiagnostic, &seen);
  strataSessionDestroy(s);
  void *inputs[2];
  StrataTensorInfo info;
  for (int i = 0; i < 2; ++i) {
    check(strataExecutableInputInfo(exe, i, &info) == 0, "input info");
    int64_t elements = 1;
    for (int64_t d = 0; d < info.rank; ++d)
      elements *= info.shape[d];
    inputs[i] = calloc((size_t)elements, 8);
  }
  double loss = 0;
  check(
      strataExecutableReadBatch(exe, NULL, STRATA_DATA_TEXT, 0, inputs) == 0 &&
          strataExecutableStep(exe, (const void *const *)inputs, &loss) == 0 &&
          loss > 0,
      "the executable trains after its session was destroyed");
  check(strataExecutableInputInfo(exe, 7, &info) != 0 && seen.errors == 1,
        "and reports an error through the session's callback");
  for (int i = 0; i < 2; ++i)
    free(inputs[i]);
  strataExecutableDestroy(exe);
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

  /* A compiled program is for reading: an executable is refused with why. */
  {
    StrataExecutableOptions options;
    StrataExecutable exe = NULL;
    strataExecutableOptionsInit(&options);
    check(strataExecutableCreate(s, &options, &exe) != 0 && exe == NULL,
          "create from a compiled program fails");
    check(errorSays(s, "already compiled"),
          "the error says the program is compiled");
  }

  /* A pipeline that fails leaves the program as it was. */
  check(strataSessionGenerateGpt(s, 1, 16, 2, 8, 64, 2, 0.1) == 0,
        "generate for the failing pipeline");
  check(strataSessionRunPipeline(s, "strata-autodiff,strata-autodiff,"
                                    "strata-optimizer,strata-optimizer") != 0,
        "a pipeline whose last pass fails");
  check(!programContains(s, "strata.adamw_update") &&
            !programContains(s, "strata.grad_of"),
        "the failed pipeline changed nothing");
  check(strataSessionRunPipeline(
            s, "strata-strategy-check{strategy=/nonexistent.yaml}") != 0,
        "the strategy check's own strategy missing");
  check(errorSays(s, "/nonexistent.yaml"),
        "its error comes back through the session");

  /* The printed program parses back. */
  check(strataSessionParseProgram(s, out.data, out.size, "roundtrip") == 0,
        "reparse");

  /* Errors carry locations and messages. */
  const char *bad = "func.func @f() {\n  %0 = strata.bogus\n}\n";
  check(strataSessionParseProgram(s, bad, strlen(bad), "bad.mlir") != 0,
        "bad program fails");
  check(errorSays(s, "bad.mlir:2"), "error names the line");
  check(strataSessionRunPipeline(s, "strata-no-such-pass") != 0,
        "unknown pass fails");
  /* An option value LLVM's parser refuses: the error says where its reason
     went, without a leading empty line. */
  check(strataSessionRunPipeline(s, "strata-gradient-merge{k-steps=abc}") !=
                0 &&
            strncmp(strataSessionLastError(s), "failed to add", 13) == 0 &&
            errorSays(s, "wrote why to standard error"),
        "a bad option value names where its reason went");
  check(strataSessionGenerateGpt(s, 1, 30, 4, 8, 64, 2, 0.0) != 0,
        "invalid model fails");
  check(errorSays(s, "hidden (30) must be divisible by heads (4)"),
        "model error names the arguments");
  check(!errorSays(s, "--hidden"), "model error names no strata-gen flag");

  if (strategyPath) {
    check(strataSessionGenerateGpt(s, 1, 16, 2, 8, 64, 2, 0.1) == 0,
          "generate again");
    check(strataSessionApplyStrategy(s, strategyPath, 0, 0) == 0,
          "apply strategy");
    check(programContains(s, "strata.fused_gemm_epilogue"),
          "strategy fused the GEMMs");
  }
  check(strataSessionApplyStrategy(s, "/nonexistent.yaml", 0, 0) != 0,
        "missing strategy fails");
  check(errorSays(s, "/nonexistent.yaml"), "strategy error names the file");

  free(out.data);
  strataSessionDestroy(s);
  check(strataApiVersion() == STRATA_C_API_VERSION, "API version");
  executableErrors();
  sessionFirst();
  printf("capi: %d passed, %d failed\n", passed, failed);
  return failed != 0;
}

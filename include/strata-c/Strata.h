/*===- strata-c/Strata.h - C API for embedding the Strata compiler -------===*
 *
 * A framework hands Strata a training program (MLIR text in the strata
 * dialect, or one of the reference models), and either compiles it (a
 * strategy file or a pass pipeline) and reads the compiled program back, or
 * creates an executable for one rank of a job and trains it: one step on the
 * host buffers of a batch, checkpoints, the planned memory.
 *
 * Sessions and executables are opaque handles; every call that can fail
 * returns 0 on success and non-zero on failure, with the diagnostics in
 * strataSessionLastError() and, when one is set, through the session's
 * diagnostic callback. An executable reports through its session, which
 * lives on until its last executable is destroyed (a session destroyed
 * first ends then; its handle is not used again, and the executable's
 * diagnostics still reach the session's callback).
 *
 * A call on a NULL session or executable fails (strataSessionLastError(NULL)
 * says so; strataExecutableNumInputs(NULL) is -1); a NULL pointer where a
 * call needs one is an error that names it, and the call does nothing.
 *
 * Not thread-safe per session; separate sessions are independent.
 * docs/embedding.md has a complete example.
 *
 *===---------------------------------------------------------------------===*/

#ifndef STRATA_C_STRATA_H
#define STRATA_C_STRATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header. Version 2 added executables, diagnostics
 * callbacks and the rank of strataSessionApplyStrategy; version 3 the data
 * format of strataExecutableReadBatch; version 4 the executable options'
 * collectiveTimeout. */
#define STRATA_C_API_VERSION 4

/* The version the library implements; a caller built against another
 * version should refuse to go on. */
int strataApiVersion(void);

typedef struct StrataSessionImpl *StrataSession;
typedef struct StrataExecutableImpl *StrataExecutable;

/* A new session with an empty program; NULL when out of memory. */
StrataSession strataSessionCreate(void);
void strataSessionDestroy(StrataSession session);

/* Parses and verifies `length` bytes of MLIR text as the session's program.
 * `bufferName` names it in diagnostics. */
int strataSessionParseProgram(StrataSession session, const char *text,
                              size_t length, const char *bufferName);

/* Replaces the program by a reference GPT (as strata-gen gpt). */
int strataSessionGenerateGpt(StrataSession session, int64_t layers,
                             int64_t hidden, int64_t heads, int64_t seq,
                             int64_t vocab, int64_t batch, double dropout);

/* Runs a textual pass pipeline, e.g. "strata-autodiff,strata-optimizer" or,
 * anchored as mlir-opt's --pass-pipeline,
 * "builtin.module(strata-autodiff,strata-optimizer)". The program changes
 * only when the whole pipeline succeeds (as for strataSessionApplyStrategy).
 * A program compiled this way (its step returns gradients) is for reading:
 * executables are created from the program as written. */
int strataSessionRunPipeline(StrataSession session, const char *pipeline);

/* Loads a strategy file (YAML/JSON, Paddle's keys) and runs the passes it
 * selects for rank `rank` of `worldSize` ranks (`worldSize` 0 when unknown:
 * then rank 0; at most 2^20). */
int strataSessionApplyStrategy(StrataSession session, const char *path,
                               int64_t worldSize, int64_t rank);

/* Calls `callback` with the program's text (possibly in several pieces). */
typedef void (*StrataStringCallback)(const char *data, size_t length,
                                     void *userData);
int strataSessionPrintProgram(StrataSession session,
                              StrataStringCallback callback, void *userData);

/* Diagnostics of the last call when it failed ("" after a call that
 * succeeded); valid until the next call on the session. */
const char *strataSessionLastError(StrataSession session);

typedef enum {
  STRATA_DIAGNOSTIC_ERROR = 0,
  STRATA_DIAGNOSTIC_WARNING = 1,
  STRATA_DIAGNOSTIC_NOTE = 2,
  STRATA_DIAGNOSTIC_REMARK = 3,
} StrataDiagnosticSeverity;

/* Receives every diagnostic of the session's calls (and of its
 * executables'), as it is emitted: `location` is "file:line:col" when the
 * diagnostic has one (in the program or the strategy file), the file's
 * name when it is about a whole file (a strategy file that cannot be
 * read), "" otherwise; `message` the text alone. Errors also land
 * in strataSessionLastError(). NULL removes the callback. The callback runs
 * inside the call that emits the diagnostic and must not call this API. */
typedef void (*StrataDiagnosticCallback)(StrataDiagnosticSeverity severity,
                                         const char *location,
                                         const char *message, void *userData);
void strataSessionSetDiagnosticCallback(StrataSession session,
                                        StrataDiagnosticCallback callback,
                                        void *userData);

/*===--- Executables: one rank of a training job --------------------------===*/

/* Element types of host buffers; the values equal the runtime ABI's codes. */
typedef enum {
  STRATA_F32 = 0,
  STRATA_I32 = 1,
  STRATA_I64 = 2,
  STRATA_BF16 = 3,
  STRATA_F16 = 4,
  STRATA_I8 = 5,
  STRATA_U8 = 6,
} StrataElementType;

typedef struct {
  /* sizeof(StrataExecutableOptions) as the caller knows it (set by
   * strataExecutableOptionsInit): later versions append fields. */
  size_t size;
  /* A strategy file (YAML/JSON); NULL: the default strategy (one rank's
   * plain training). */
  const char *strategyPath;
  /* The job: `worldSize` ranks, this is `rank`. */
  int64_t worldSize;
  int64_t rank;
  /* "cpu" (the CPU runtime, JIT-compiled), "cuda" (the CUDA runtime,
   * JIT-compiled; one GPU per rank, chosen by the rank's place on its
   * machine) or "reference" (the double-precision evaluator). */
  const char *backend;
  /* Seed of the initial weights, dropout and the built-in data. */
  uint64_t seed;
  /* Kernel threads of this rank (1 to 4096). */
  int64_t threads;
  /* With worldSize > 1: the address of the caller's MPI_Comm (an
   * `MPI_Comm *`), whose ranks are the job's; MPI must be initialised (and
   * not finalised), the communicator not MPI_COMM_NULL, and it must outlive
   * the executable. */
  const void *mpiComm;
  /* Non-zero: complete every collective where it is issued (no overlap). */
  int blockingCollectives;
  /* Non-zero ("cpu" backend only): time each distinct f32 GEMM once through
   * oneDNN's matmul primitive, its sgemm and (with AVX2) Strata's packed
   * GEMM, and run the fastest (results then move at rounding level between
   * runs and thread counts). */
  int gemmAutotune;
  /* With worldSize > 1: seconds a rank may wait for its peers in one MPI
   * call (a collective, send, receive or wait) before it ends the process
   * (exit status 1), saying so on stderr with the op it waited in: MPI
   * cannot cancel the call, and a peer that stopped or hangs would keep
   * it waiting for ever. 0: wait for ever. Each executable has its own:
   * a call waits as long as the executable it is a call of allows. */
  double collectiveTimeout;
} StrataExecutableOptions;

/* Defaults: no strategy, one rank, "cpu", seed 0, one thread, a collective
 * timeout of 1800 s. */
void strataExecutableOptionsInit(StrataExecutableOptions *options);

/* Compiles the session's program (a forward step and its loss, as
 * strata-gen writes it) with the strategy for one rank, and creates the
 * backend's executable with the seeded initial weights. The session's
 * program is left as it was. In a job of several ranks every rank calls it
 * with the same program, strategy, seed and backend (a rank given others
 * fails every rank's call, naming it); when one rank fails, every rank's
 * call fails (naming the rank), so that none goes on to wait in a
 * collective. (A rank without a communicator cannot tell the others:
 * options NULL or of the wrong size, mpiComm NULL or MPI_COMM_NULL, MPI not
 * initialised, a worldSize of 1 on one rank only. They wait for it until
 * their collectiveTimeout ends the job.) */
int strataExecutableCreate(StrataSession session,
                           const StrataExecutableOptions *options,
                           StrataExecutable *executable);
void strataExecutableDestroy(StrataExecutable executable);

/* The step's inputs (the global batch: every rank passes the whole batch,
 * and each takes its rows). */
typedef struct {
  const char *name; /* e.g. "tokens", "targets", "features", "labels" */
  StrataElementType elementType;
  int64_t rank;
  const int64_t *shape; /* `rank` sizes */
} StrataTensorInfo;
int64_t strataExecutableNumInputs(StrataExecutable executable);
/* Valid while the executable lives. */
int strataExecutableInputInfo(StrataExecutable executable, int64_t index,
                              StrataTensorInfo *info);

/* How a data file holds its token ids: every byte a token (text), or
 * little-endian uint16 / uint32 ids (nanoGPT's .bin files are uint16). */
typedef enum {
  STRATA_DATA_TEXT = 0,
  STRATA_DATA_UINT16 = 1,
  STRATA_DATA_UINT32 = 2,
} StrataDataFormat;

/* Fills `inputs` (one buffer per input, row-major, of its element type and
 * shape) with batch `step` (>= 0) of the data stream strata-run uses: token
 * ids of `dataPath` in `format` (a StrataDataFormat value; a file, or for
 * text a directory of them;
 * NULL: the licence texts of /usr/share/common-licenses; "" is refused), or
 * the synthetic classification or regression task of the seed. The stream
 * fills [rows, sequence] tokens and targets, [rows, width] features and
 * [rows] labels, or [rows, width] features and [rows, ...] float targets;
 * every token id is checked against the program's vocabulary. The
 * last path and format read are kept: another path or format, or a file
 * that changed since it was read, reads its file again. */
int strataExecutableReadBatch(StrataExecutable executable, const char *dataPath,
                              int format, int64_t step, void *const *inputs);

/* Trains one step on `inputs` (as strataExecutableReadBatch describes) and
 * stores the loss. Every rank of the job calls it with the same batch. A
 * NaN or infinite loss is an error. A step that fails may have updated part
 * of the state (an id out of range and a NaN loss are found at its end):
 * after it the executable neither trains nor saves until a checkpoint is
 * loaded. */
int strataExecutableStep(StrataExecutable executable, const void *const *inputs,
                         double *loss);

/* Replaces weights and optimizer state by a checkpoint's (safetensors, as
 * strata-run writes; any strategy) and stores the steps it had done. Every
 * rank calls it; when it fails on one, it fails on every rank, and if other
 * ranks loaded it (the ranks' states now differ) no rank trains or saves
 * until a checkpoint loads on all of them. */
int strataExecutableLoadCheckpoint(StrataExecutable executable,
                                   const char *path, int64_t *stepsDone);
/* Writes weights and optimizer state after `stepsDone` steps, and the
 * executable's seed (rank 0 writes; every rank calls it with the same
 * `stepsDone`). When it fails on one rank (rank 0's write, or a rank's
 * step count), it fails on every rank. */
int strataExecutableSaveCheckpoint(StrataExecutable executable,
                                   const char *path, int64_t stepsDone);

/* This rank's planned memory, in bytes. */
typedef struct {
  int64_t peak;        /* arena + persistent + inputs */
  int64_t arena;       /* intermediate values of a step */
  int64_t persistent;  /* parameters and optimizer state, resident */
  int64_t inputs;      /* one batch */
  int64_t activations; /* the most bytes alive at one op */
  int64_t parameters, gradients, optimizerState; /* ZeRO's accounting */
  int64_t scratch; /* kernel scratch beyond the plan (CPU backend) */
} StrataMemoryPlan;
int strataExecutableMemoryPlan(StrataExecutable executable,
                               StrataMemoryPlan *plan);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_C_STRATA_H */

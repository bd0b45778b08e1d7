/*===- strata-c/Strata.h - C API for embedding the Strata compiler -------===*
 *
 * A framework hands Strata a training program (MLIR text in the strata
 * dialect, or one of the reference models), applies a strategy file or a
 * pass pipeline, and reads the compiled program back. Sessions are opaque
 * handles; every call that can fail returns 0 on success and non-zero on
 * failure, with the diagnostics in strataSessionLastError().
 *
 * Not thread-safe per session; separate sessions are independent.
 *
 *===---------------------------------------------------------------------===*/

#ifndef STRATA_C_STRATA_H
#define STRATA_C_STRATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct StrataSessionImpl *StrataSession;

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
 * "builtin.module(strata-autodiff,strata-optimizer)". */
int strataSessionRunPipeline(StrataSession session, const char *pipeline);

/* Loads a strategy file (YAML/JSON, Paddle's keys) and runs the passes it
 * selects; `worldSize` 0 when unknown. */
int strataSessionApplyStrategy(StrataSession session, const char *path,
                               int64_t worldSize);

/* Calls `callback` with the program's text (possibly in several pieces). */
typedef void (*StrataStringCallback)(const char *data, size_t length,
                                     void *userData);
int strataSessionPrintProgram(StrataSession session,
                              StrataStringCallback callback, void *userData);

/* Diagnostics of the last failed call ("" when none); valid until the next
 * call on the session. */
const char *strataSessionLastError(StrataSession session);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_C_STRATA_H */

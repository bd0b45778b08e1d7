/* Trains a program through the C API alone, as a framework embedding Strata
 * would: parse, create an executable for this rank (under mpirun: the
 * world's rank, with MPI_COMM_WORLD), feed batches, checkpoint.
 *
 *   strata-capi-train PROGRAM.mlir STEPS SEED STRATEGY|- BACKEND [SPLIT FILE]
 *
 * prints `step <i> loss <value>` on rank 0, and the planned memory. With
 * SPLIT, it saves a checkpoint to FILE after SPLIT steps, destroys the
 * executable, creates another and resumes from the checkpoint. Under mpirun
 * it also checks that training left Open MPI's settings as the framework had
 * them (Strata selects an MPI_Iallreduce algorithm for its own calls only). */

#include "strata-c/Strata.h"

#include <errno.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int useMpi, rank, size;

static void die(StrataSession s, const char *what) {
  fprintf(stderr, "capi-train: rank %d: %s failed:\n%s", rank, what,
          s ? strataSessionLastError(s) : "");
  if (useMpi)
    MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

static void onDiagnostic(StrataDiagnosticSeverity severity,
                         const char *location, const char *message,
                         void *user) {
  (void)user;
  static const char *names[] = {"error", "warning", "note", "remark"};
  fprintf(stderr, "diagnostic: %s%s%s: %s\n", location, *location ? ": " : "",
          names[severity], message);
}

static StrataExecutable create(StrataSession s, const char *strategy,
                               const char *backend, uint64_t seed,
                               MPI_Comm *comm, const char *timeout) {
  StrataExecutableOptions options;
  strataExecutableOptionsInit(&options);
  options.strategyPath = strategy;
  options.backend = backend;
  options.seed = seed;
  options.worldSize = size;
  options.rank = rank;
  options.mpiComm = useMpi ? comm : NULL;
  /* The test of the refusal of MPI_COMM_NULL (test/run/capi.test). */
  static MPI_Comm nullComm = MPI_COMM_NULL;
  if (useMpi && getenv("CAPI_TRAIN_NULL_COMM"))
    options.mpiComm = &nullComm;
  /* The test of the collective timeout (test/run/capi.test). */
  if (timeout)
    options.collectiveTimeout = atof(timeout);
  StrataExecutable exe = NULL;
  if (strataExecutableCreate(s, &options, &exe) != 0)
    die(s, "strataExecutableCreate");
  return exe;
}

static char *readFile(const char *path, size_t *length) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)n + 1);
  if (fread(text, 1, (size_t)n, f) != (size_t)n) {
    perror(path);
    exit(1);
  }
  fclose(f);
  text[n] = 0;
  *length = (size_t)n;
  return text;
}

static size_t elementBytes(StrataElementType type) {
  switch (type) {
  case STRATA_I64:
    return 8;
  case STRATA_BF16:
  case STRATA_F16:
    return 2;
  case STRATA_I8:
  case STRATA_U8:
    return 1;
  default:
    return 4;
  }
}

/* Open MPI's MPI_Iallreduce algorithm setting (libnbc), or -1 where this
 * MPI has none. */
static int iallreduceAlgorithm(void) {
  int provided, index, count, value = -1;
  MPI_T_cvar_handle handle;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS)
    return -1;
  if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) ==
          MPI_SUCCESS &&
      MPI_T_cvar_handle_alloc(index, NULL, &handle, &count) == MPI_SUCCESS) {
    if (count != 1 || MPI_T_cvar_read(handle, &value) != MPI_SUCCESS)
      value = -1;
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  return value;
}

/* ARG as a whole number of at least MIN, or a usage error naming WHAT. */
static long long parseCount(const char *arg, const char *what, long long min) {
  char *end;
  errno = 0;
  long long value = strtoll(arg, &end, 10);
  if (errno != 0 || end == arg || *end != '\0' || value < min) {
    fprintf(stderr, "error: %s must be a whole number >= %lld, got '%s'\n",
            what, min, arg);
    exit(2);
  }
  return value;
}

int main(int argc, char **argv) {
  if (argc != 6 && argc != 8) {
    fprintf(stderr,
            "usage: %s PROGRAM.mlir STEPS SEED STRATEGY|- BACKEND "
            "[SPLIT FILE]\n",
            argv[0]);
    return 2;
  }
  if (strataApiVersion() != STRATA_C_API_VERSION) {
    fprintf(stderr, "built against C API %d, the library is %d\n",
            STRATA_C_API_VERSION, strataApiVersion());
    return 1;
  }
  long long steps = parseCount(argv[2], "STEPS", 1);
  uint64_t seed = (uint64_t)parseCount(argv[3], "SEED", 0);
  long long split = argc == 8 ? parseCount(argv[6], "SPLIT", 1) : -1;
  useMpi = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
  size = 1;
  MPI_Comm comm = MPI_COMM_NULL;
  if (useMpi) {
    MPI_Init(&argc, &argv);
    comm = MPI_COMM_WORLD;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
  }
  int algorithmBefore = useMpi ? iallreduceAlgorithm() : -1;
  const char *strategy = strcmp(argv[4], "-") == 0 ? NULL : argv[4];
  const char *backend = argv[5];
  const char *checkpoint = argc == 8 ? argv[7] : NULL;

  StrataSession s = strataSessionCreate();
  if (!s)
    die(NULL, "strataSessionCreate");
  if (rank == 0)
    strataSessionSetDiagnosticCallback(s, onDiagnostic, NULL);
  size_t length;
  char *text = readFile(argv[1], &length);
  if (strataSessionParseProgram(s, text, length, argv[1]) != 0)
    die(s, "strataSessionParseProgram");
  free(text);

  /* The test of each executable's own collective timeout (test/run/
     capi.test): an executable created first with a timeout of 1000 s
     lives beside the one that trains, whose own timeout must hold. */
  StrataExecutable patient = NULL;
  if (getenv("CAPI_TRAIN_PATIENT_FIRST"))
    patient = create(s, strategy, backend, seed, &comm, "1000");
  StrataExecutable exe =
      create(s, strategy, backend, seed, &comm, getenv("CAPI_TRAIN_TIMEOUT"));
  int64_t n = strataExecutableNumInputs(exe);
  void **inputs = calloc((size_t)n, sizeof(void *));
  for (int64_t i = 0; i < n; ++i) {
    StrataTensorInfo info;
    if (strataExecutableInputInfo(exe, i, &info) != 0)
      die(s, "strataExecutableInputInfo");
    size_t count = 1;
    for (int64_t d = 0; d < info.rank; ++d)
      count *= (size_t)info.shape[d];
    inputs[i] = malloc(count * elementBytes(info.elementType));
    if (rank == 0)
      printf("input %s: type %d, %zu elements\n", info.name,
             (int)info.elementType, count);
  }
  /* The test of the collective timeout: this rank stops (as a hung
     process would) before its second step. */
  const char *stopping = getenv("CAPI_TRAIN_STOPS_ON_RANK");
  for (long long i = 0; i < steps; ++i) {
    if (i == 1 && stopping && atoi(stopping) == rank)
      raise(SIGSTOP);
    if (strataExecutableReadBatch(exe, NULL, STRATA_DATA_TEXT, i, inputs) != 0)
      die(s, "strataExecutableReadBatch");
    double loss;
    if (strataExecutableStep(exe, (const void *const *)inputs, &loss) != 0)
      die(s, "strataExecutableStep");
    if (rank == 0)
      printf("step %lld loss %.17g\n", i, loss);
    if (i + 1 == split) {
      /* The test of a save that fails on one rank (test/run/capi.test):
         the rank's own error, or a bad step count; every rank's save
         fails, and each ends without waiting for the others. */
      const char *saveFails = getenv("CAPI_TRAIN_SAVE_FAILS_ON_RANK");
      int failsHere = saveFails && atoi(saveFails) == rank;
      if (strataExecutableSaveCheckpoint(
              exe,
              failsHere && rank == 0 ? "/nonexistent/strata.safetensors"
                                     : checkpoint,
              failsHere && rank != 0 ? -3 : split) != 0) {
        if (!saveFails)
          die(s, "strataExecutableSaveCheckpoint");
        fprintf(stderr, "capi-train: rank %d: save failed: %s", rank,
                strataSessionLastError(s));
        strataExecutableDestroy(exe);
        strataSessionDestroy(s);
        MPI_Finalize();
        return 3;
      }
      strataExecutableDestroy(exe);
      exe = create(s, strategy, backend, seed, &comm,
                   getenv("CAPI_TRAIN_TIMEOUT"));
      int64_t done = -1;
      /* The test of a load that fails on one rank (test/run/capi.test):
         every rank's load fails, and none trains on. */
      const char *failing = getenv("CAPI_TRAIN_LOAD_FAILS_ON_RANK");
      if (failing && atoi(failing) == rank)
        checkpoint = "/nonexistent/strata.safetensors";
      if (strataExecutableLoadCheckpoint(exe, checkpoint, &done) != 0) {
        if (!failing)
          die(s, "strataExecutableLoadCheckpoint");
        fprintf(stderr, "capi-train: rank %d: load failed: %s", rank,
                strataSessionLastError(s));
        double refused;
        if (strataExecutableStep(exe, (const void *const *)inputs, &refused) ==
            0) {
          fprintf(stderr, "capi-train: rank %d: trained on\n", rank);
          return 1;
        }
        fprintf(stderr, "capi-train: rank %d: step refused: %s", rank,
                strataSessionLastError(s));
        strataExecutableDestroy(exe);
        strataSessionDestroy(s);
        MPI_Finalize();
        return 3;
      }
      if (done != split) {
        fprintf(stderr, "the checkpoint says %lld steps, expected %lld\n",
                (long long)done, split);
        return 1;
      }
      if (rank == 0)
        printf("resumed after step %lld\n", (long long)done);
    }
  }
  StrataMemoryPlan plan;
  if (strataExecutableMemoryPlan(exe, &plan) != 0)
    die(s, "strataExecutableMemoryPlan");
  if (rank == 0)
    printf("memory: peak %lld arena %lld parameters %lld optimizer state "
           "%lld\n",
           (long long)plan.peak, (long long)plan.arena,
           (long long)plan.parameters, (long long)plan.optimizerState);
  for (int64_t i = 0; i < n; ++i)
    free(inputs[i]);
  free(inputs);
  strataExecutableDestroy(exe);
  if (patient)
    strataExecutableDestroy(patient);
  strataSessionDestroy(s);
  if (useMpi) {
    int algorithmAfter = iallreduceAlgorithm();
    if (algorithmAfter != algorithmBefore) {
      fprintf(stderr,
              "rank %d: coll_libnbc_iallreduce_algorithm was %d, is %d after "
              "training\n",
              rank, algorithmBefore, algorithmAfter);
      return 1;
    }
    MPI_Finalize();
  }
  return 0;
}

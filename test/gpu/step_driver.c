/* Runs the training step of an object file that `strata-run --emit=obj`
   wrote, linked with a runtime (CPU or CUDA: buffers live in the runtime's
   memory), as a framework would: the buffer sizes come from the object's
   own layout tables (printed first), the initial parameters and state and
   each step's inputs from raw files (test/gpu/prepare.py writes them for
   the GPU check), and the losses are printed as strata-run prints them,
   for compare_losses.py.

     step_driver DIR STEPS SEED [--time | --profile]

   DIR holds p<i>.bin for persistent buffer i (missing: zeros) and
   s<step>.in<j>.bin for input j of each step, each exactly the size of the
   object's layout tables. With --time (the benchmark) the steps cycle over
   the inputs there are, and the mean time of the steps after the first
   three is printed as "time <ms> ms/step". --profile times the same way and
   also prints, for the steps after the first three, each op's mean time
   per step from the runtime's trace, slowest first ("op <ms> <site>
   <name>", named from DIR/sites.txt where there is one; the step must be
   lowered with tracing: strata-run --emit=obj --emit-tracing). */
#include "strata/Runtime/StrataRuntime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern const int64_t strata_step_abi_version[1];
extern const int64_t strata_step_layout[4];
extern const int64_t strata_step_persistent_bytes[];
extern const int64_t strata_step_input_bytes[];
extern const int64_t strata_step_output_bytes[];
void strata_step(StrataRtContext *ctx, void *arena, void **persistent,
                 void **inputs, void **outputs);

/* Reads file `path` (exactly `bytes` long, or missing when `optional`: then
   zeros, since a runtime's allocations hold whatever was there) into
   runtime memory `to`. Returns 0 on success. */
static int load(StrataRtContext *ctx, const char *path, void *to, int64_t bytes,
                int optional) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (!optional) {
      fprintf(stderr, "cannot open %s\n", path);
      return 1;
    }
    void *zeros = calloc((size_t)bytes, 1);
    if (!zeros) {
      fprintf(stderr, "out of host memory for %s\n", path);
      return 1;
    }
    strata_rt_write(ctx, to, zeros, bytes);
    free(zeros);
    return 0;
  }
  char *host = malloc((size_t)bytes + 1);
  size_t got = fread(host, 1, (size_t)bytes + 1, f);
  fclose(f);
  if ((int64_t)got != bytes) {
    fprintf(stderr, "%s holds %zu bytes, the step wants %lld\n", path, got,
            (long long)bytes);
    free(host);
    return 1;
  }
  strata_rt_write(ctx, to, host, bytes);
  free(host);
  return 0;
}

/* Per-site time in ms over the profiled steps. */
typedef struct {
  int64_t site;
  double ms;
} SiteTime;

static int slowerFirst(const void *a, const void *b) {
  double x = ((const SiteTime *)a)->ms, y = ((const SiteTime *)b)->ms;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Prints the sites' mean times per step, named from DIR/sites.txt. */
static void printProfile(const char *dir, SiteTime *sites, int64_t n,
                         int steps) {
  char path[4096], line[4096];
  char **names = calloc((size_t)n + 1, sizeof(char *));
  snprintf(path, sizeof(path), "%s/sites.txt", dir);
  FILE *f = fopen(path, "r");
  for (int64_t i = 0; f && i < n && fgets(line, sizeof(line), f); ++i) {
    line[strcspn(line, "\n")] = 0;
    names[i] = strdup(line);
  }
  if (f)
    fclose(f);
  double total = 0;
  for (int64_t i = 0; i < n; ++i)
    total += sites[i].ms;
  qsort(sites, (size_t)n, sizeof(SiteTime), slowerFirst);
  printf("ops %.3f ms/step\n", total / steps);
  for (int64_t i = 0; i < n && sites[i].ms > 0; ++i) {
    const char *name = names[sites[i].site];
    printf("op %.3f %lld %s\n", sites[i].ms / steps, (long long)sites[i].site,
           name ? name : "");
  }
  for (int64_t i = 0; i < n; ++i)
    free(names[i]);
  free(names);
}

int main(int argc, char **argv) {
  int profile = argc == 5 && strcmp(argv[4], "--profile") == 0;
  int timing = profile || (argc == 5 && strcmp(argv[4], "--time") == 0);
  if (argc != 4 && !timing) {
    fprintf(stderr, "usage: %s DIR STEPS SEED [--time | --profile]\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  int steps = atoi(argv[2]);
  if (strata_step_abi_version[0] != strata_rt_abi_version()) {
    fprintf(stderr, "lowered for runtime ABI %lld, runtime has %lld\n",
            (long long)strata_step_abi_version[0],
            (long long)strata_rt_abi_version());
    return 1;
  }
  StrataRtOptions options;
  strata_rt_default_options(&options);
  options.seed = strtoull(argv[3], NULL, 10);
  char message[256];
  StrataRtContext *ctx = strata_rt_create(&options, message, sizeof(message));
  if (!ctx) {
    fprintf(stderr, "%s\n", message);
    return 1;
  }
  int64_t np = strata_step_layout[1], ni = strata_step_layout[2],
          no = strata_step_layout[3];
  printf("arena %lld persistent %lld inputs %lld outputs %lld\n",
         (long long)strata_step_layout[0], (long long)np, (long long)ni,
         (long long)no);
  void **persistent = malloc(sizeof(void *) * (size_t)(np + 1));
  void **inputs = malloc(sizeof(void *) * (size_t)(ni + 1));
  void **outputs = malloc(sizeof(void *) * (size_t)(no + 1));
  void *arena = strata_rt_alloc(ctx, strata_step_layout[0]);
  char path[4096];
  int failed = arena == NULL;
  for (int64_t i = 0; i < np && !failed; ++i) {
    persistent[i] = strata_rt_alloc(ctx, strata_step_persistent_bytes[i]);
    snprintf(path, sizeof(path), "%s/p%lld.bin", dir, (long long)i);
    failed = !persistent[i] ||
             load(ctx, path, persistent[i], strata_step_persistent_bytes[i], 1);
  }
  for (int64_t i = 0; i < ni && !failed; ++i)
    failed = !(inputs[i] = strata_rt_alloc(ctx, strata_step_input_bytes[i]));
  for (int64_t i = 0; i < no && !failed; ++i)
    failed = !(outputs[i] = strata_rt_alloc(ctx, strata_step_output_bytes[i]));
  /* The steps whose inputs are there (--time cycles over them). */
  int available = 0;
  for (FILE *f; ni > 0; ++available) {
    snprintf(path, sizeof(path), "%s/s%d.in0.bin", dir, available);
    if (!(f = fopen(path, "rb")))
      break;
    fclose(f);
  }
  if (timing && available == 0 && ni > 0) {
    fprintf(stderr, "no inputs in %s\n", dir);
    failed = 1;
  }
  double total = 0;
  int timed = 0;
  SiteTime *sites = NULL;
  int64_t nsites = 0;
  for (int s = 0; s < steps && !failed; ++s) {
    if (profile && s == 3)
      strata_rt_enable_trace(ctx, 1);
    int from = timing && available ? s % available : s;
    for (int64_t i = 0; i < ni && !failed; ++i) {
      snprintf(path, sizeof(path), "%s/s%d.in%lld.bin", dir, from,
               (long long)i);
      failed = load(ctx, path, inputs[i], strata_step_input_bytes[i], 0);
    }
    if (failed)
      break;
    strata_rt_clear_error(ctx);
    struct timespec begin, end;
    clock_gettime(CLOCK_MONOTONIC, &begin);
    /* The step ends with strata_rt_step_end: its work is complete. */
    strata_step(ctx, arena, persistent, inputs, outputs);
    clock_gettime(CLOCK_MONOTONIC, &end);
    if (s >= 3) {
      total += (double)(end.tv_sec - begin.tv_sec) * 1e3 +
               (double)(end.tv_nsec - begin.tv_nsec) / 1e6;
      ++timed;
    }
    if (profile && s >= 3) {
      size_t count = 0;
      const StrataRtTraceEvent *events = strata_rt_take_trace(ctx, &count);
      for (size_t e = 0; e < count; ++e) {
        int64_t at = events[e].site;
        if (at < 0)
          continue;
        if (at >= nsites) {
          sites = realloc(sites, sizeof(SiteTime) * (size_t)(at + 1));
          for (int64_t k = nsites; k <= at; ++k)
            sites[k] = (SiteTime){k, 0};
          nsites = at + 1;
        }
        sites[at].ms += (events[e].end - events[e].begin) / 1e3;
      }
    }
    int64_t site = -1;
    const char *error = strata_rt_error(ctx, &site);
    if (error) {
      fprintf(stderr, "step %d, site %lld: %s\n", s, (long long)site, error);
      failed = 1;
      break;
    }
    float loss = 0;
    strata_rt_read(ctx, &loss, outputs[0], sizeof(loss));
    if (!timing)
      printf("step %d loss %.9g\n", s, loss);
  }
  if (timing && !failed && timed > 0)
    printf("time %.3f ms/step\n", total / timed);
  if (profile && !failed && timed > 0)
    printProfile(dir, sites, nsites, timed);
  free(sites);
  int64_t site = -1;
  const char *error = strata_rt_error(ctx, &site);
  if (error && !failed) {
    fprintf(stderr, "site %lld: %s\n", (long long)site, error);
    failed = 1;
  }
  strata_rt_destroy(ctx);
  free(persistent);
  free(inputs);
  free(outputs);
  return failed;
}

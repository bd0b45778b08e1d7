/* Links an object file written by `strata-run --emit=obj` with the CPU
   runtime and runs one step, as a framework would: the buffer sizes come
   from the object's own layout tables. Every buffer starts at zero, except
   input `fill_input` (argv[1]) whose int32 elements are set to argv[2].
   Prints the first output as a float. */
#include "strata/Runtime/StrataRuntime.h"

#include <stdio.h>
#include <stdlib.h>

extern const int64_t strata_step_abi_version[1];
extern const int64_t strata_step_layout[4];
extern const int64_t strata_step_persistent_bytes[];
extern const int64_t strata_step_input_bytes[];
extern const int64_t strata_step_output_bytes[];
void strata_step(StrataRtContext *ctx, void *arena, void **persistent,
                 void **inputs, void **outputs);

static void *zeros(int64_t bytes) {
  void *p = aligned_alloc(64, (size_t)((bytes + 63) / 64 * 64 + 64));
  for (int64_t i = 0; i < bytes; ++i)
    ((char *)p)[i] = 0;
  return p;
}

int main(int argc, char **argv) {
  int64_t arena = strata_step_layout[0], np = strata_step_layout[1],
          ni = strata_step_layout[2], no = strata_step_layout[3];
  printf("arena %lld persistent %lld inputs %lld outputs %lld\n",
         (long long)arena, (long long)np, (long long)ni, (long long)no);
  void **persistent = malloc(sizeof(void *) * (size_t)(np + 1));
  void **inputs = malloc(sizeof(void *) * (size_t)(ni + 1));
  void **outputs = malloc(sizeof(void *) * (size_t)(no + 1));
  for (int64_t i = 0; i < np; ++i)
    persistent[i] = zeros(strata_step_persistent_bytes[i]);
  for (int64_t i = 0; i < ni; ++i)
    inputs[i] = zeros(strata_step_input_bytes[i]);
  for (int64_t i = 0; i < no; ++i)
    outputs[i] = zeros(strata_step_output_bytes[i]);
  if (argc > 2) {
    int64_t which = atoi(argv[1]);
    int32_t value = atoi(argv[2]);
    for (int64_t i = 0; i < strata_step_input_bytes[which] / 4; ++i)
      ((int32_t *)inputs[which])[i] = value;
  }
  if (strata_step_abi_version[0] != strata_rt_abi_version()) {
    fprintf(stderr, "lowered for runtime ABI %lld, runtime has %lld\n",
            (long long)strata_step_abi_version[0],
            (long long)strata_rt_abi_version());
    return 1;
  }
  StrataRtOptions options;
  strata_rt_default_options(&options);
  char message[256];
  StrataRtContext *ctx = strata_rt_create(&options, message, sizeof(message));
  if (!ctx) {
    fprintf(stderr, "%s\n", message);
    return 1;
  }
  void *a = zeros(arena);
  strata_step(ctx, a, persistent, inputs, outputs);
  int64_t site = -1;
  const char *error = strata_rt_error(ctx, &site);
  if (error) {
    fprintf(stderr, "site %lld: %s\n", (long long)site, error);
    return 1;
  }
  printf("output 0: %.6f\n", *(float *)outputs[0]);
  strata_rt_destroy(ctx);
  return 0;
}

/* Links an object file written by `strata-run --emit=obj` with a runtime
   (CPU or CUDA: buffers live in the runtime's memory) and runs one step, as
   a framework would: the buffer sizes come from the object's own layout
   tables. Every buffer starts at zero, except input `fill_input` (argv[1])
   whose int32 elements are set to argv[2]. Prints the first output as a
   float. */
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

int main(int argc, char **argv) {
  int64_t arena = strata_step_layout[0], np = strata_step_layout[1],
          ni = strata_step_layout[2], no = strata_step_layout[3];
  printf("arena %lld persistent %lld inputs %lld outputs %lld\n",
         (long long)arena, (long long)np, (long long)ni, (long long)no);
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
  void **persistent = malloc(sizeof(void *) * (size_t)(np + 1));
  void **inputs = malloc(sizeof(void *) * (size_t)(ni + 1));
  void **outputs = malloc(sizeof(void *) * (size_t)(no + 1));
  /* strata_rt_alloc's memory starts at zero. */
  for (int64_t i = 0; i < np; ++i)
    persistent[i] = strata_rt_alloc(ctx, strata_step_persistent_bytes[i]);
  for (int64_t i = 0; i < ni; ++i)
    inputs[i] = strata_rt_alloc(ctx, strata_step_input_bytes[i]);
  for (int64_t i = 0; i < no; ++i)
    outputs[i] = strata_rt_alloc(ctx, strata_step_output_bytes[i]);
  void *a = strata_rt_alloc(ctx, arena);
  if (argc > 2) {
    int64_t which = atoi(argv[1]);
    int64_t count = strata_step_input_bytes[which] / 4;
    int32_t *values = malloc(sizeof(int32_t) * (size_t)count);
    for (int64_t i = 0; i < count; ++i)
      values[i] = atoi(argv[2]);
    strata_rt_write(ctx, inputs[which], values, count * 4);
    free(values);
  }
  strata_step(ctx, a, persistent, inputs, outputs);
  int64_t site = -1;
  const char *error = strata_rt_error(ctx, &site);
  if (error) {
    fprintf(stderr, "site %lld: %s\n", (long long)site, error);
    return 1;
  }
  float loss = 0;
  strata_rt_read(ctx, &loss, outputs[0], sizeof(loss));
  printf("output 0: %.6f\n", loss);
  for (int64_t i = 0; i < np; ++i)
    strata_rt_free(ctx, persistent[i]);
  for (int64_t i = 0; i < ni; ++i)
    strata_rt_free(ctx, inputs[i]);
  for (int64_t i = 0; i < no; ++i)
    strata_rt_free(ctx, outputs[i]);
  strata_rt_free(ctx, a);
  free(persistent);
  free(inputs);
  free(outputs);
  strata_rt_destroy(ctx);
  return 0;
}

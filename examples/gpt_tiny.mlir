module {
  strata.param @wte : tensor<256x64xf32> init <normal, 2.000000e-02 : f64>
  strata.param @wpe : tensor<32x64xf32> init <normal, 2.000000e-02 : f64>
  strata.param @h0.ln_1.weight : tensor<64xf32> init <ones>
  strata.param @h0.ln_1.bias : tensor<64xf32> init <zeros>
  strata.param @h0.attn.q.weight : tensor<64x64xf32> init <normal, 2.000000e-02 : f64>
  strata.param @h0.attn.q.bias : tensor<64xf32> init <zeros>
  strata.param @h0.attn.k.weight : tensor<64x64xf32> init <normal, 2.000000e-02 : f64>
  strata.param @h0.attn.k.bias : tensor<64xf32> init <zeros>
  strata.param @h0.attn.v.weight : tensor<64x64xf32> init <normal, 2.000000e-02 : f64>
  strata.param @h0.attn.v.bias : tensor<64xf32> init <zeros>
  strata.param @h0.attn.proj.weight : tensor<64x64xf32> init <normal, 1.000000e-02 : f64>
  strata.param @h0.attn.proj.bias : tensor<64xf32> init <zeros>
  strata.param @h0.ln_2.weight : tensor<64xf32> init <ones>
  strata.param @h0.ln_2.bias : tensor<64xf32> init <zeros>
  strata.param @h0.mlp.fc.weight : tensor<64x256xf32> init <normal, 2.000000e-02 : f64>
  strata.param @h0.mlp.fc.bias : tensor<256xf32> init <zeros>
  strata.param @h0.mlp.proj.weight : tensor<256x64xf32> init <normal, 1.000000e-02 : f64>
  strata.param @h0.mlp.proj.bias : tensor<64xf32> init <zeros>
  strata.param @h1.ln_1.weight : tensor<64xf32> init <ones>
  strata.param @h1.ln_1.bias : tensor<64xf32> init <zeros>
  strata.param @h1.attn.q.weight : tensor<64x64xf32> init <normal, 2.000000e-02 : f64>
  strata.param @h1.attn.q.bias : tensor<64xf32> init <zeros>
  strata.param @h1.attn.k.weight : tensor<64x64xf32> init <normal, 2.000000e-02 : f64>
  strata.param @h1.attn.k.bias : tensor<64xf32> init <zeros>
  strata.param @h1.attn.v.weight : tensor<64x64xf32> init <normal, 2.000000e-02 : f64>
  strata.param @h1.attn.v.bias : tensor<64xf32> init <zeros>
  strata.param @h1.attn.proj.weight : tensor<64x64xf32> init <normal, 1.000000e-02 : f64>
  strata.param @h1.attn.proj.bias : tensor<64xf32> init <zeros>
  strata.param @h1.ln_2.weight : tensor<64xf32> init <ones>
  strata.param @h1.ln_2.bias : tensor<64xf32> init <zeros>
  strata.param @h1.mlp.fc.weight : tensor<64x256xf32> init <normal, 2.000000e-02 : f64>
  strata.param @h1.mlp.fc.bias : tensor<256xf32> init <zeros>
  strata.param @h1.mlp.proj.weight : tensor<256x64xf32> init <normal, 1.000000e-02 : f64>
  strata.param @h1.mlp.proj.bias : tensor<64xf32> init <zeros>
  strata.param @ln_f.weight : tensor<64xf32> init <ones>
  strata.param @ln_f.bias : tensor<64xf32> init <zeros>
  func.func @train_step(%arg0: tensor<8x32xi32> {strata.name = "tokens"}, %arg1: tensor<8x32xi32> {strata.name = "targets"}) -> tensor<f32> {
    %0 = strata.get_param @wte : tensor<256x64xf32>
    %1 = strata.get_param @wpe : tensor<32x64xf32>
    %2 = strata.embedding %0, %arg0 : (tensor<256x64xf32>, tensor<8x32xi32>) -> tensor<8x32x64xf32>
    %3 = strata.add %2, %1 : (tensor<8x32x64xf32>, tensor<32x64xf32>) -> tensor<8x32x64xf32>
    %4 = strata.dropout %3 {key = 0 : i64, prob = 1.000000e-01 : f64} : (tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %5 = strata.get_param @h0.ln_1.weight {strata.layer = "h0"} : tensor<64xf32>
    %6 = strata.get_param @h0.ln_1.bias {strata.layer = "h0"} : tensor<64xf32>
    %7 = strata.layer_norm %4, %5, %6 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %8 = strata.get_param @h0.attn.q.weight {strata.layer = "h0"} : tensor<64x64xf32>
    %9 = strata.get_param @h0.attn.q.bias {strata.layer = "h0"} : tensor<64xf32>
    %10 = strata.matmul %7, %8 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<64x64xf32>) -> tensor<8x32x64xf32>
    %11 = strata.bias_add %10, %9 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %12 = strata.reshape %11 {strata.layer = "h0"} : (tensor<8x32x64xf32>) -> tensor<8x32x4x16xf32>
    %13 = strata.transpose %12 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = "h0"} : (tensor<8x32x4x16xf32>) -> tensor<8x4x32x16xf32>
    %14 = strata.get_param @h0.attn.k.weight {strata.layer = "h0"} : tensor<64x64xf32>
    %15 = strata.get_param @h0.attn.k.bias {strata.layer = "h0"} : tensor<64xf32>
    %16 = strata.matmul %7, %14 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<64x64xf32>) -> tensor<8x32x64xf32>
    %17 = strata.bias_add %16, %15 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %18 = strata.reshape %17 {strata.layer = "h0"} : (tensor<8x32x64xf32>) -> tensor<8x32x4x16xf32>
    %19 = strata.transpose %18 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = "h0"} : (tensor<8x32x4x16xf32>) -> tensor<8x4x32x16xf32>
    %20 = strata.get_param @h0.attn.v.weight {strata.layer = "h0"} : tensor<64x64xf32>
    %21 = strata.get_param @h0.attn.v.bias {strata.layer = "h0"} : tensor<64xf32>
    %22 = strata.matmul %7, %20 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<64x64xf32>) -> tensor<8x32x64xf32>
    %23 = strata.bias_add %22, %21 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %24 = strata.reshape %23 {strata.layer = "h0"} : (tensor<8x32x64xf32>) -> tensor<8x32x4x16xf32>
    %25 = strata.transpose %24 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = "h0"} : (tensor<8x32x4x16xf32>) -> tensor<8x4x32x16xf32>
    %26 = strata.matmul %13, %19 {strata.layer = "h0", transpose_rhs} : (tensor<8x4x32x16xf32>, tensor<8x4x32x16xf32>) -> tensor<8x4x32x32xf32>
    %27 = strata.scale %26 {factor = 2.500000e-01 : f64, strata.layer = "h0"} : (tensor<8x4x32x32xf32>) -> tensor<8x4x32x32xf32>
    %28 = strata.softmax %27 {causal, strata.layer = "h0"} : (tensor<8x4x32x32xf32>) -> tensor<8x4x32x32xf32>
    %29 = strata.matmul %28, %25 {strata.layer = "h0"} : (tensor<8x4x32x32xf32>, tensor<8x4x32x16xf32>) -> tensor<8x4x32x16xf32>
    %30 = strata.transpose %29 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = "h0"} : (tensor<8x4x32x16xf32>) -> tensor<8x32x4x16xf32>
    %31 = strata.reshape %30 {strata.layer = "h0"} : (tensor<8x32x4x16xf32>) -> tensor<8x32x64xf32>
    %32 = strata.get_param @h0.attn.proj.weight {strata.layer = "h0"} : tensor<64x64xf32>
    %33 = strata.get_param @h0.attn.proj.bias {strata.layer = "h0"} : tensor<64xf32>
    %34 = strata.matmul %31, %32 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<64x64xf32>) -> tensor<8x32x64xf32>
    %35 = strata.bias_add %34, %33 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %36 = strata.dropout %35 {key = 1 : i64, prob = 1.000000e-01 : f64, strata.layer = "h0"} : (tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %37 = strata.add %4, %36 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %38 = strata.get_param @h0.ln_2.weight {strata.layer = "h0"} : tensor<64xf32>
    %39 = strata.get_param @h0.ln_2.bias {strata.layer = "h0"} : tensor<64xf32>
    %40 = strata.layer_norm %37, %38, %39 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %41 = strata.get_param @h0.mlp.fc.weight {strata.layer = "h0"} : tensor<64x256xf32>
    %42 = strata.get_param @h0.mlp.fc.bias {strata.layer = "h0"} : tensor<256xf32>
    %43 = strata.matmul %40, %41 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<64x256xf32>) -> tensor<8x32x256xf32>
    %44 = strata.bias_add %43, %42 {strata.layer = "h0"} : (tensor<8x32x256xf32>, tensor<256xf32>) -> tensor<8x32x256xf32>
    %45 = strata.gelu %44 {approximate = #strata.gelu<tanh>, strata.layer = "h0"} : (tensor<8x32x256xf32>) -> tensor<8x32x256xf32>
    %46 = strata.get_param @h0.mlp.proj.weight {strata.layer = "h0"} : tensor<256x64xf32>
    %47 = strata.get_param @h0.mlp.proj.bias {strata.layer = "h0"} : tensor<64xf32>
    %48 = strata.matmul %45, %46 {strata.layer = "h0"} : (tensor<8x32x256xf32>, tensor<256x64xf32>) -> tensor<8x32x64xf32>
    %49 = strata.bias_add %48, %47 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %50 = strata.dropout %49 {key = 2 : i64, prob = 1.000000e-01 : f64, strata.layer = "h0"} : (tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %51 = strata.add %37, %50 {strata.layer = "h0"} : (tensor<8x32x64xf32>, tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %52 = strata.get_param @h1.ln_1.weight {strata.layer = "h1"} : tensor<64xf32>
    %53 = strata.get_param @h1.ln_1.bias {strata.layer = "h1"} : tensor<64xf32>
    %54 = strata.layer_norm %51, %52, %53 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %55 = strata.get_param @h1.attn.q.weight {strata.layer = "h1"} : tensor<64x64xf32>
    %56 = strata.get_param @h1.attn.q.bias {strata.layer = "h1"} : tensor<64xf32>
    %57 = strata.matmul %54, %55 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<64x64xf32>) -> tensor<8x32x64xf32>
    %58 = strata.bias_add %57, %56 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %59 = strata.reshape %58 {strata.layer = "h1"} : (tensor<8x32x64xf32>) -> tensor<8x32x4x16xf32>
    %60 = strata.transpose %59 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = "h1"} : (tensor<8x32x4x16xf32>) -> tensor<8x4x32x16xf32>
    %61 = strata.get_param @h1.attn.k.weight {strata.layer = "h1"} : tensor<64x64xf32>
    %62 = strata.get_param @h1.attn.k.bias {strata.layer = "h1"} : tensor<64xf32>
    %63 = strata.matmul %54, %61 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<64x64xf32>) -> tensor<8x32x64xf32>
    %64 = strata.bias_add %63, %62 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %65 = strata.reshape %64 {strata.layer = "h1"} : (tensor<8x32x64xf32>) -> tensor<8x32x4x16xf32>
    %66 = strata.transpose %65 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = "h1"} : (tensor<8x32x4x16xf32>) -> tensor<8x4x32x16xf32>
    %67 = strata.get_param @h1.attn.v.weight {strata.layer = "h1"} : tensor<64x64xf32>
    %68 = strata.get_param @h1.attn.v.bias {strata.layer = "h1"} : tensor<64xf32>
    %69 = strata.matmul %54, %67 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<64x64xf32>) -> tensor<8x32x64xf32>
    %70 = strata.bias_add %69, %68 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %71 = strata.reshape %70 {strata.layer = "h1"} : (tensor<8x32x64xf32>) -> tensor<8x32x4x16xf32>
    %72 = strata.transpose %71 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = "h1"} : (tensor<8x32x4x16xf32>) -> tensor<8x4x32x16xf32>
    %73 = strata.matmul %60, %66 {strata.layer = "h1", transpose_rhs} : (tensor<8x4x32x16xf32>, tensor<8x4x32x16xf32>) -> tensor<8x4x32x32xf32>
    %74 = strata.scale %73 {factor = 2.500000e-01 : f64, strata.layer = "h1"} : (tensor<8x4x32x32xf32>) -> tensor<8x4x32x32xf32>
    %75 = strata.softmax %74 {causal, strata.layer = "h1"} : (tensor<8x4x32x32xf32>) -> tensor<8x4x32x32xf32>
    %76 = strata.matmul %75, %72 {strata.layer = "h1"} : (tensor<8x4x32x32xf32>, tensor<8x4x32x16xf32>) -> tensor<8x4x32x16xf32>
    %77 = strata.transpose %76 {permutation = array<i64: 0, 2, 1, 3>, strata.layer = "h1"} : (tensor<8x4x32x16xf32>) -> tensor<8x32x4x16xf32>
    %78 = strata.reshape %77 {strata.layer = "h1"} : (tensor<8x32x4x16xf32>) -> tensor<8x32x64xf32>
    %79 = strata.get_param @h1.attn.proj.weight {strata.layer = "h1"} : tensor<64x64xf32>
    %80 = strata.get_param @h1.attn.proj.bias {strata.layer = "h1"} : tensor<64xf32>
    %81 = strata.matmul %78, %79 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<64x64xf32>) -> tensor<8x32x64xf32>
    %82 = strata.bias_add %81, %80 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %83 = strata.dropout %82 {key = 3 : i64, prob = 1.000000e-01 : f64, strata.layer = "h1"} : (tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %84 = strata.add %51, %83 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %85 = strata.get_param @h1.ln_2.weight {strata.layer = "h1"} : tensor<64xf32>
    %86 = strata.get_param @h1.ln_2.bias {strata.layer = "h1"} : tensor<64xf32>
    %87 = strata.layer_norm %84, %85, %86 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %88 = strata.get_param @h1.mlp.fc.weight {strata.layer = "h1"} : tensor<64x256xf32>
    %89 = strata.get_param @h1.mlp.fc.bias {strata.layer = "h1"} : tensor<256xf32>
    %90 = strata.matmul %87, %88 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<64x256xf32>) -> tensor<8x32x256xf32>
    %91 = strata.bias_add %90, %89 {strata.layer = "h1"} : (tensor<8x32x256xf32>, tensor<256xf32>) -> tensor<8x32x256xf32>
    %92 = strata.gelu %91 {approximate = #strata.gelu<tanh>, strata.layer = "h1"} : (tensor<8x32x256xf32>) -> tensor<8x32x256xf32>
    %93 = strata.get_param @h1.mlp.proj.weight {strata.layer = "h1"} : tensor<256x64xf32>
    %94 = strata.get_param @h1.mlp.proj.bias {strata.layer = "h1"} : tensor<64xf32>
    %95 = strata.matmul %92, %93 {strata.layer = "h1"} : (tensor<8x32x256xf32>, tensor<256x64xf32>) -> tensor<8x32x64xf32>
    %96 = strata.bias_add %95, %94 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %97 = strata.dropout %96 {key = 4 : i64, prob = 1.000000e-01 : f64, strata.layer = "h1"} : (tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %98 = strata.add %84, %97 {strata.layer = "h1"} : (tensor<8x32x64xf32>, tensor<8x32x64xf32>) -> tensor<8x32x64xf32>
    %99 = strata.get_param @ln_f.weight : tensor<64xf32>
    %100 = strata.get_param @ln_f.bias : tensor<64xf32>
    %101 = strata.layer_norm %98, %99, %100 : (tensor<8x32x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x32x64xf32>
    %102 = strata.matmul %101, %0 {transpose_rhs} : (tensor<8x32x64xf32>, tensor<256x64xf32>) -> tensor<8x32x256xf32>
    %103 = strata.cross_entropy %102, %arg1 : (tensor<8x32x256xf32>, tensor<8x32xi32>) -> tensor<f32>
    return %103 : tensor<f32>
  }
}


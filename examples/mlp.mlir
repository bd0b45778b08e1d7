module {
  strata.param @fc0.weight : tensor<784x1024xf32> init <uniform, 0.035714285714285712 : f64>
  strata.param @fc0.bias : tensor<1024xf32> init <uniform, 0.035714285714285712 : f64>
  strata.param @fc1.weight : tensor<1024x1024xf32> init <uniform, 3.125000e-02 : f64>
  strata.param @fc1.bias : tensor<1024xf32> init <uniform, 3.125000e-02 : f64>
  strata.param @fc2.weight : tensor<1024x10xf32> init <uniform, 3.125000e-02 : f64>
  strata.param @fc2.bias : tensor<10xf32> init <uniform, 3.125000e-02 : f64>
  func.func @train_step(%arg0: tensor<256x784xf32> {strata.name = "features"}, %arg1: tensor<256xi32> {strata.name = "labels"}) -> tensor<f32> {
    %0 = strata.get_param @fc0.weight {strata.layer = "fc0"} : tensor<784x1024xf32>
    %1 = strata.get_param @fc0.bias {strata.layer = "fc0"} : tensor<1024xf32>
    %2 = strata.matmul %arg0, %0 {strata.layer = "fc0"} : (tensor<256x784xf32>, tensor<784x1024xf32>) -> tensor<256x1024xf32>
    %3 = strata.bias_add %2, %1 {strata.layer = "fc0"} : (tensor<256x1024xf32>, tensor<1024xf32>) -> tensor<256x1024xf32>
    %4 = strata.relu %3 {strata.layer = "fc0"} : (tensor<256x1024xf32>) -> tensor<256x1024xf32>
    %5 = strata.get_param @fc1.weight {strata.layer = "fc1"} : tensor<1024x1024xf32>
    %6 = strata.get_param @fc1.bias {strata.layer = "fc1"} : tensor<1024xf32>
    %7 = strata.matmul %4, %5 {strata.layer = "fc1"} : (tensor<256x1024xf32>, tensor<1024x1024xf32>) -> tensor<256x1024xf32>
    %8 = strata.bias_add %7, %6 {strata.layer = "fc1"} : (tensor<256x1024xf32>, tensor<1024xf32>) -> tensor<256x1024xf32>
    %9 = strata.relu %8 {strata.layer = "fc1"} : (tensor<256x1024xf32>) -> tensor<256x1024xf32>
    %10 = strata.get_param @fc2.weight {strata.layer = "fc2"} : tensor<1024x10xf32>
    %11 = strata.get_param @fc2.bias {strata.layer = "fc2"} : tensor<10xf32>
    %12 = strata.matmul %9, %10 {strata.layer = "fc2"} : (tensor<256x1024xf32>, tensor<1024x10xf32>) -> tensor<256x10xf32>
    %13 = strata.bias_add %12, %11 {strata.layer = "fc2"} : (tensor<256x10xf32>, tensor<10xf32>) -> tensor<256x10xf32>
    %14 = strata.cross_entropy %13, %arg1 : (tensor<256x10xf32>, tensor<256xi32>) -> tensor<f32>
    return %14 : tensor<f32>
  }
}


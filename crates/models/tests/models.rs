//! Parameter counts, names and shapes of the architectures. Expected counts come from the
//! PyTorch definitions in `bench/torch_models.py` (`python bench/torch_models.py`).

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use burn::prelude::*;
use resilab_models::{Arch, InputShape, Mode, ModelConfig, init_parameters, map_params, named_params};

fn cfg(arch: Arch, depth: Option<usize>, width: f64, batch_norm: Option<bool>) -> ModelConfig {
    ModelConfig { arch, depth, width, batch_norm }
}

const RGB32: InputShape = InputShape { channels: 3, size: 32 };

#[test]
fn parameter_counts_match_pytorch() {
    let device = Device::flex();
    let cases = [
        (cfg(Arch::Resnet, Some(8), 1.0, None), 78_042),
        (cfg(Arch::Resnet, Some(20), 1.0, None), 272_474),
        (cfg(Arch::Resnet, Some(18), 0.25, None), 701_466),
        (cfg(Arch::Vgg, Some(11), 0.25, Some(true)), 579_786),
        (cfg(Arch::Vgg, Some(11), 1.0, Some(true)), 9_231_114),
        (cfg(Arch::Alexnet, None, 0.5, None), 1_797_290),
        (cfg(Arch::Alexnet, None, 1.0, None), 7_176_522),
    ];
    for (c, expected) in cases {
        let net = c.build(RGB32, 10, &device).unwrap();
        assert_eq!(net.num_trainable(), expected, "{}", c.label());
    }
}

#[test]
fn the_footprint_counts_what_the_built_network_holds_without_building_it() {
    let device = Device::flex();
    let mnist = InputShape { channels: 1, size: 28 };
    for (c, input) in [
        (cfg(Arch::Resnet, Some(8), 1.0, None), RGB32),
        (cfg(Arch::Resnet, Some(20), 0.5, None), mnist),
        (cfg(Arch::Resnet, Some(18), 0.25, None), RGB32),
        (cfg(Arch::Vgg, Some(11), 0.25, Some(true)), mnist),
        (cfg(Arch::Vgg, Some(16), 0.125, Some(false)), RGB32),
        (cfg(Arch::Alexnet, None, 0.5, None), RGB32),
        (cfg(Arch::Alexnet, None, 0.25, Some(true)), mnist),
    ] {
        let f = c.footprint(input, 10).unwrap();
        let net = c.build(input, 10, &device).unwrap();
        assert_eq!(f.values, net.num_values() as u64, "{}", c.label());
        assert_eq!(f.trainable, net.num_trainable() as u64, "{}", c.label());
        assert!(f.activations_per_image > f.values / 100, "{}: {f:?}", c.label());
    }
    // ResNet-8's activations by hand: the stem and layer1 keep 3 tensors of 16x32x32 per
    // convolution (3 convolutions), layer2 and layer3 2 convolutions and a shortcut each at
    // 32x16x16 and 64x8x8, and the head its 64 pooled values and 10 logits.
    let r8 = cfg(Arch::Resnet, Some(8), 1.0, None).footprint(RGB32, 10).unwrap();
    assert_eq!(r8.activations_per_image, 3 * 3 * 16 * 32 * 32 + 3 * 3 * 32 * 16 * 16 + 3 * 3 * 64 * 8 * 8 + 64 + 10);
    // A model far beyond any memory is counted without overflow or allocation.
    let huge = cfg(Arch::Resnet, Some(1202), 16.0, None).footprint(RGB32, 10).unwrap();
    assert!(huge.trainable > 3_000_000_000, "{huge:?}");
}

#[test]
fn names_follow_pytorch_state_dict() {
    let device = Device::flex();
    let net = cfg(Arch::Resnet, Some(8), 1.0, None).build(RGB32, 10, &device).unwrap();
    let names: Vec<String> = named_params(&net).into_iter().map(|p| p.name).collect();
    for expected in [
        "stem.conv.weight",
        "stem.bn.weight",
        "stem.bn.bias",
        "stem.bn.running_mean",
        "stem.bn.running_var",
        "layer1.0.conv1.weight",
        "layer1.0.bn1.running_var",
        "layer2.0.downsample.conv.weight",
        "layer2.0.downsample.bn.weight",
        "classifier.fc.weight",
        "classifier.fc.bias",
    ] {
        assert!(names.iter().any(|n| n == expected), "missing {expected} in {names:?}");
    }
    let running = named_params(&net).into_iter().filter(|p| p.name.ends_with("running_var")).count();
    assert!(running > 0);
    assert!(named_params(&net).iter().filter(|p| p.name.contains("running")).all(|p| !p.trainable));
    assert_eq!(net.block_names.first().map(String::as_str), Some("stem"));
    assert_eq!(net.block_names.last().map(String::as_str), Some("classifier"));

    let vgg = cfg(Arch::Vgg, Some(11), 0.25, Some(false)).build(RGB32, 10, &device).unwrap();
    let names: Vec<String> = named_params(&vgg).into_iter().map(|p| p.name).collect();
    assert!(names.contains(&"features.0.conv.bias".to_string()), "{names:?}");
    assert!(names.contains(&"features.7.conv.weight".to_string()), "{names:?}");
    let alex = cfg(Arch::Alexnet, None, 0.5, None).build(RGB32, 10, &device).unwrap();
    let names: Vec<String> = named_params(&alex).into_iter().map(|p| p.name).collect();
    assert!(names.contains(&"classifier.fc3.weight".to_string()), "{names:?}");
}

#[test]
fn every_architecture_runs_on_28_and_32_pixel_images() {
    let device = Device::flex();
    for c in [
        cfg(Arch::Resnet, Some(8), 0.25, None),
        cfg(Arch::Resnet, Some(18), 0.125, None),
        cfg(Arch::Vgg, Some(11), 0.125, Some(true)),
        cfg(Arch::Vgg, Some(16), 0.125, Some(false)),
        cfg(Arch::Alexnet, None, 0.125, None),
    ] {
        for input in [RGB32, InputShape { channels: 1, size: 28 }] {
            let net = c.build(input, 7, &device).unwrap();
            let mut net = init_parameters(net, 1, &device);
            let x = Tensor::zeros([2, input.channels, input.size, input.size], &device);
            assert_eq!(net.forward(x, Mode::Eval).dims(), [2, 7], "{} {input:?}", c.label());
        }
    }
}

/// ResNet-8 in eval mode, its values set so that the output can be computed by hand: every
/// convolution zero except the shortcuts' 1x1 convolutions, which copy channel c to channel c;
/// every BatchNorm with statistics 0 and 1, scale 1 and shift 0.5, so it gives x / s + 0.5 with
/// s = sqrt(1 + eps). Then, whatever the image:
/// - the stem gives relu(0.5) = 0.5, and layer1's block relu(0.5 + 0.5) = 1 (its identity
///   shortcut adds the stem's output);
/// - layer2's block gives, in each of its 32 channels c, relu(0.5 + x_c / s + 0.5) where x_c is
///   layer1's channel c (1 for c < 16, 0 beyond): 1 + 1/s for c < 16, 1 beyond;
/// - layer3's block gives 1 + y_c / s for its first 32 channels (y: layer2's output), 1 beyond;
/// - the pool keeps each channel's value, and the classifier, with row k of its weight k/64 and
///   bias 0.25, gives logit k = k/64 * (sum of the 64 channels) + 0.25.
#[test]
fn a_forward_pass_computed_by_hand() {
    let device = Device::flex();
    let net = cfg(Arch::Resnet, Some(8), 1.0, None).build(RGB32, 10, &device).unwrap();
    let net = map_params(net, |info, _| {
        let n: usize = info.shape.iter().product();
        let values: Vec<f32> = match info.name.as_str() {
            "classifier.fc.weight" => (0..n).map(|i| (i / 64) as f32 / 64.0).collect(),
            "classifier.fc.bias" => vec![0.25; n],
            name if name.ends_with("downsample.conv.weight") => {
                let c_in = info.shape[1];
                (0..n).map(|i| if i / c_in == i % c_in { 1.0 } else { 0.0 }).collect()
            }
            name if name.ends_with("running_var") => vec![1.0; n],
            name if name.contains("bn") && name.ends_with(".weight") => vec![1.0; n],
            name if name.contains("bn") && name.ends_with(".bias") => vec![0.5; n],
            _ => vec![0.0; n],
        };
        Some(Tensor::from_data(TensorData::new(values, [n]), &device))
    });
    let x = Tensor::<4>::random([2, 3, 32, 32], burn::tensor::Distribution::Normal(0.0, 1.0), &device);
    let logits = net.infer(x).into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
    let s = (1.0 + resilab_models::BN_EPSILON).sqrt();
    let layer2: Vec<f64> = (0..32).map(|c| if c < 16 { 1.0 + 1.0 / s } else { 1.0 }).collect();
    let layer3: Vec<f64> = (0..64).map(|c| if c < 32 { 1.0 + layer2[c] / s } else { 1.0 }).collect();
    let total: f64 = layer3.iter().sum();
    for (i, got) in logits.iter().enumerate() {
        let want = (i % 10) as f64 / 64.0 * total + 0.25;
        assert!((f64::from(*got) - want).abs() <= 1e-5 * want.abs().max(1.0), "logit {i}: {got}, by hand {want}");
    }
}

#[test]
fn initialisation_is_deterministic_and_seeded() {
    let device = Device::flex();
    let c = cfg(Arch::Resnet, Some(8), 0.5, None);
    let values = |seed| {
        let net = init_parameters(c.build(RGB32, 10, &device).unwrap(), seed, &device);
        let mut all = Vec::new();
        resilab_models::for_each_param(&net, |_, t| all.extend(t.into_data().try_to_vec::<f32>().unwrap()));
        all
    };
    let a = values(5);
    assert_eq!(a, values(5));
    assert_ne!(a, values(6));
}

#[test]
fn bad_depth_names_the_key_and_allowed_values() {
    let err = cfg(Arch::Vgg, Some(13), 1.0, None).validate(RGB32, 10).unwrap_err().to_string();
    assert!(err.contains("model.depth") && err.contains("11, 16"), "{err}");
    let err = cfg(Arch::Resnet, Some(10), 1.0, None).validate(RGB32, 10).unwrap_err().to_string();
    assert!(err.contains("model.depth") && err.contains("6n+2"), "{err}");
}

#[test]
fn batchnorm_running_stats_follow_pytorch_and_clones_are_independent() {
    use resilab_models::BatchNorm2d;
    let device = Device::flex().autodiff();
    let mut bn = BatchNorm2d::new(1, &device);
    let copy = bn.clone();
    // One channel, values 1..=4 : mean 2.5, unbiased var 5/3.
    let x = Tensor::<1>::from_floats([1.0, 2.0, 3.0, 4.0], &device).reshape([4, 1, 1, 1]);
    let _ = bn.forward_train(x);
    let mean = bn.running_mean.val().into_data().try_to_vec::<f32>().unwrap()[0];
    let var = bn.running_var.val().into_data().try_to_vec::<f32>().unwrap()[0];
    assert!((mean - 0.25).abs() < 1e-6, "{mean}");
    assert!((var - (0.9 + 0.1 * 5.0 / 3.0)).abs() < 1e-6, "{var}");
    // The copy made before the update still has the initial statistics.
    assert_eq!(copy.running_mean.val().into_data().try_to_vec::<f32>().unwrap(), vec![0.0]);
}

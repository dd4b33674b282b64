//! Layers, the one home of their names: what `runs.csv`'s `layers` column records for a
//! corrupted checkpoint dataset ([`recorded`]), and the layer (module path) a report groups
//! such an entry under ([`layer`]).

use resilab_models::{DatasetKind, DatasetPath};

/// The `layers` entry of a corrupted checkpoint dataset: a model parameter's path without its
/// tensor name (`/model/layer1/0/conv1/weight` gives `model/layer1/0/conv1`); any other
/// dataset's whole path (`/optimizer/fc/weight/momentum_buffer`).
pub fn recorded(dataset: &str) -> String {
    match dataset.parse() {
        Ok(DatasetPath::Model(name)) => match name.rsplit_once('.') {
            Some((module, _)) => DatasetPath::Model(module.to_string()).to_string(),
            None => DatasetKind::Model.root().to_string(),
        },
        _ => dataset.trim_start_matches('/').to_string(),
    }
}

/// The layer (module path) an entry of the `layers` column belongs to: `model/layer1/0/bn1`
/// and `optimizer/layer1/0/bn1/weight/momentum_buffer` are both `layer1/0/bn1`; other entries
/// (`train_state/step`) are their own.
pub fn layer(entry: &str) -> String {
    match entry.parse() {
        Ok(p @ DatasetPath::Model(_)) => p.rest(),
        Ok(p @ DatasetPath::Optimizer { .. }) => match p.param().rsplit_once('.') {
            Some((module, _)) => DatasetPath::Model(module.to_string()).rest(),
            None => p.rest(),
        },
        _ => entry.trim_start_matches('/').to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dataset_is_recorded_and_grouped_under_its_layer() {
        assert_eq!(recorded("/model/layer1/0/conv1/weight"), "model/layer1/0/conv1");
        assert_eq!(recorded("/optimizer/fc/weight/momentum_buffer"), "optimizer/fc/weight/momentum_buffer");
        assert_eq!(layer(&recorded("/model/layer1/0/bn1/weight")), "layer1/0/bn1");
        assert_eq!(layer("model/layer1/0/bn1"), "layer1/0/bn1");
        assert_eq!(layer("/optimizer/layer1/0/bn1/weight/momentum_buffer"), "layer1/0/bn1");
        assert_eq!(layer("optimizer/classifier/fc/bias/exp_avg"), "classifier/fc");
        assert_eq!(layer("train_state/step"), "train_state/step");
        assert_eq!(recorded("/model/fc"), "model");
        assert_eq!(layer("optimizer/fc/exp_avg"), "fc/exp_avg");
    }
}

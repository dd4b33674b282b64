//! Byte mode: single bit flips in a file's bytes, bypassing HDF5, to model corruption of the
//! file itself (metadata included).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use resilab_h5::Extent;
use serde::{Deserialize, Serialize};

use crate::config::Region;
use crate::run::Outcome;

/// One byte-mode attempt, as logged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ByteRecord {
    /// Attempt number, from 0.
    pub attempt: u64,
    /// Byte offset in the file.
    pub offset: u64,
    /// Bit of that byte, 0 = least significant.
    pub bit: u32,
    /// What happened (`corrupted` or `not_selected`).
    pub outcome: Outcome,
    /// The byte before.
    pub old_byte: u8,
    /// The byte after.
    pub new_byte: u8,
    /// `data` when the byte belongs to a dataset's contiguous storage, else `metadata`.
    pub region: String,
    /// The dataset whose element holds the byte, if any.
    pub dataset: Option<String>,
    /// That element's flat index.
    pub element: Option<u64>,
    /// The flipped bit in the element's word, IEEE numbering (little-endian storage).
    pub element_bit_ieee: Option<u32>,
}

/// The byte intervals of a file of `file_len` bytes that `region` covers: sorted, disjoint
/// `[start, end)`, from `extents` sorted by offset (as [`resilab_h5::Reader::extents`] gives them).
pub fn region_intervals(region: Region, file_len: u64, extents: &[Extent]) -> Vec<(u64, u64)> {
    let mut data: Vec<(u64, u64)> = Vec::new();
    for e in extents {
        let (s, t) = (e.offset.min(file_len), (e.offset + e.size).min(file_len));
        match data.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(t),
            _ if s < t => data.push((s, t)),
            _ => {}
        }
    }
    match region {
        Region::File => vec![(0, file_len)],
        Region::Data => data,
        Region::Metadata => {
            let mut out = Vec::new();
            let mut at = 0;
            for (s, t) in data {
                if s > at {
                    out.push((at, s));
                }
                at = t;
            }
            if at < file_len {
                out.push((at, file_len));
            }
            out
        }
    }
}

/// Draws `attempts` (offset, bit, selected) triples uniformly over the intervals' bytes.
pub(crate) fn draw_bytes(intervals: &[(u64, u64)], attempts: u64, probability: f64, seed: u64) -> Vec<(u64, u32, bool)> {
    let prefix: Vec<u64> = intervals
        .iter()
        .scan(0u64, |acc, (s, t)| {
            *acc += t - s;
            Some(*acc)
        })
        .collect();
    let total = prefix.last().copied().unwrap_or(0);
    if total == 0 {
        return Vec::new();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..attempts)
        .map(|_| {
            let u = rng.random_range(0..total);
            let i = prefix.partition_point(|&end| end <= u);
            let before = if i == 0 { 0 } else { prefix[i - 1] };
            let offset = intervals[i].0 + (u - before);
            let bit = rng.random_range(0..8u32);
            let selected = probability >= 1.0 || rng.random::<f64>() < probability;
            (offset, bit, selected)
        })
        .collect()
}

/// The dataset element (path, index, element bit) a byte belongs to, if any.
pub(crate) fn locate(extents: &[Extent], offset: u64, bit: u32) -> Option<(String, u64, u32)> {
    let i = extents.partition_point(|e| e.offset <= offset).checked_sub(1)?;
    let e = &extents[i];
    if offset >= e.offset + e.size {
        return None;
    }
    let width = (e.dtype.bits() / 8).max(1) as u64;
    let rel = offset - e.offset;
    Some((e.path.clone(), rel / width, (rel % width) as u32 * 8 + bit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use resilab_h5::Dtype;

    fn ext(offset: u64, size: u64) -> Extent {
        Extent { path: format!("/d{offset}"), dtype: Dtype::F32, offset, size }
    }

    #[test]
    fn regions_partition_the_file() {
        let e = [ext(10, 20), ext(25, 10), ext(50, 8)];
        assert_eq!(region_intervals(Region::Data, 100, &e), [(10, 35), (50, 58)]);
        assert_eq!(region_intervals(Region::Metadata, 100, &e), [(0, 10), (35, 50), (58, 100)]);
        assert_eq!(region_intervals(Region::File, 100, &e), [(0, 100)]);
    }

    #[test]
    fn draws_stay_inside_the_region_and_locate_elements() {
        let e = [ext(10, 20), ext(50, 8)];
        let iv = region_intervals(Region::Data, 100, &e);
        for (o, b, _) in draw_bytes(&iv, 500, 1.0, 3) {
            assert!(iv.iter().any(|(s, t)| (*s..*t).contains(&o)), "{o}");
            let (path, el, bit) = locate(&e, o, b).unwrap();
            let x = e.iter().find(|x| x.path == path).unwrap();
            assert_eq!(el, (o - x.offset) / 4);
            assert!(bit < 32);
        }
        assert_eq!(locate(&e, 5, 0), None);
        assert_eq!(locate(&e, 30, 0), None);
    }
}

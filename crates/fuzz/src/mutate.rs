//! Mutations of a checkpoint file: bit flips, truncation, zeroed blocks and overwritten bytes,
//! weighted toward the HDF5 metadata (superblock, object headers, B-trees, heaps, attributes),
//! and cyclic hard links between groups.
//!
//! Each mutation is a value drawn from a ChaCha8 stream and then applied; applying is pure for
//! the byte mutations ([`FileMutation::apply_bytes`]), so the property tests can check that a
//! mutation changes exactly what it says and nothing else.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context as _;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Sorted, disjoint byte intervals `[start, end)` of a file.
pub type Intervals = Vec<(u64, u64)>;

/// Share of byte-level draws that land in metadata; the rest land anywhere in the file.
pub const METADATA_WEIGHT: f64 = 0.85;

/// Most bits flipped by one [`FileMutation::BitFlips`].
pub const MAX_FLIPS: usize = 16;

/// Longest [`FileMutation::ZeroBlock`].
pub const MAX_ZERO_BLOCK: u64 = 512;

/// Longest [`FileMutation::Overwrite`].
pub const MAX_OVERWRITE: u64 = 16;

/// What the mutators need to know about an intact file: its length, where its metadata lies and
/// which groups it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// File length in bytes.
    pub len: u64,
    /// Bytes outside every dataset's contiguous storage.
    pub metadata: Intervals,
    /// Every group, `/` included, parents before children.
    pub groups: Vec<String>,
}

impl Layout {
    /// Reads the layout of an intact HDF5 file (do not call this on a corrupt one: it is read
    /// in this process).
    pub fn of(file: &Path) -> anyhow::Result<Self> {
        let len = std::fs::metadata(file).with_context(|| format!("{}", file.display()))?.len();
        let reader = resilab_h5::Reader::open(file)?;
        let extents = reader.extents()?;
        let datasets: Vec<String> = reader.datasets()?.into_iter().map(|d| d.path).collect();
        Ok(Self { len, metadata: metadata_intervals(len, &extents), groups: groups_of(&datasets) })
    }
}

/// The bytes outside every dataset's contiguous storage: the split `resilab inject`'s byte mode
/// makes for `byte_region = "metadata"` (the same function).
pub fn metadata_intervals(len: u64, extents: &[resilab_h5::Extent]) -> Intervals {
    resilab_inject::region_intervals(resilab_inject::Region::Metadata, len, extents)
}

/// Every group that holds one of `datasets` (absolute paths), `/` first, parents before
/// children.
pub fn groups_of(datasets: &[String]) -> Vec<String> {
    let mut set = BTreeSet::from(["/".to_string()]);
    for d in datasets {
        let mut at = 0;
        while let Some(i) = d[at + 1..].find('/') {
            at += i + 1;
            set.insert(d[..at].to_string());
        }
    }
    set.into_iter().collect()
}

/// The ancestors of group `g` and `g` itself, `/` first.
pub fn ancestors_or_self(g: &str) -> Vec<String> {
    let mut out = vec!["/".to_string()];
    for (i, c) in g.char_indices().skip(1) {
        if c == '/' {
            out.push(g[..i].to_string());
        }
    }
    if g != "/" {
        out.push(g.to_string());
    }
    out
}

/// One mutation of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileMutation {
    /// XOR bit `bit` (0 = least significant) of the byte at each offset; the pairs are distinct.
    BitFlips(Vec<(u64, u8)>),
    /// Keep only the first `n` bytes.
    Truncate(u64),
    /// Set `len` bytes from `offset` to zero.
    ZeroBlock {
        /// First byte.
        offset: u64,
        /// Bytes zeroed.
        len: u64,
    },
    /// Replace the bytes from `offset` with `bytes` (drawn inside one metadata interval).
    Overwrite {
        /// First byte.
        offset: u64,
        /// The new bytes.
        bytes: Vec<u8>,
    },
    /// Add a hard link `link` to the group `target`, an ancestor of (or the same as) the group
    /// holding the link: the file's groups then contain themselves.
    CyclicLink {
        /// The new link's absolute path.
        link: String,
        /// The group it points at.
        target: String,
    },
}

impl std::fmt::Display for FileMutation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BitFlips(flips) => {
                let list: Vec<String> = flips.iter().map(|(o, b)| format!("{o}:{b}")).collect();
                write!(f, "bit flips (offset:bit) {}", list.join(" "))
            }
            Self::Truncate(n) => write!(f, "truncate to {n} bytes"),
            Self::ZeroBlock { offset, len } => write!(f, "zero {len} bytes at {offset}"),
            Self::Overwrite { offset, bytes } => write!(f, "overwrite {} bytes at {offset} with {bytes:02x?}", bytes.len()),
            Self::CyclicLink { link, target } => write!(f, "hard link {link} -> {target}"),
        }
    }
}

/// A byte offset: in metadata with probability [`METADATA_WEIGHT`], else anywhere.
pub fn draw_offset(rng: &mut ChaCha8Rng, layout: &Layout) -> u64 {
    if rng.random_bool(METADATA_WEIGHT)
        && let Some(o) = draw_in(rng, &layout.metadata)
    {
        return o;
    }
    rng.random_range(0..layout.len.max(1))
}

/// A byte offset uniformly over the intervals' bytes (`None` when they are empty).
fn draw_in(rng: &mut ChaCha8Rng, intervals: &[(u64, u64)]) -> Option<u64> {
    let total: u64 = intervals.iter().map(|(s, t)| t - s).sum();
    if total == 0 {
        return None;
    }
    let mut u = rng.random_range(0..total);
    for (s, t) in intervals {
        if u < t - s {
            return Some(s + u);
        }
        u -= t - s;
    }
    None
}

impl FileMutation {
    /// Draws a mutation of a file with `layout` (which must be at least one byte long): bit
    /// flips half the time, the other kinds a tenth to a sixth each.
    pub fn draw(rng: &mut ChaCha8Rng, layout: &Layout) -> Self {
        match rng.random_range(0..100) {
            0..50 => Self::draw_flips(rng, layout),
            50..60 => Self::Truncate(rng.random_range(0..layout.len.max(1))),
            60..75 => {
                let offset = draw_offset(rng, layout);
                let len = (1u64 << rng.random_range(0..=MAX_ZERO_BLOCK.ilog2())).min(layout.len - offset);
                Self::ZeroBlock { offset, len }
            }
            75..90 => Self::draw_overwrite(rng, layout),
            _ => Self::draw_link(rng, layout),
        }
    }

    /// One flip half the time, else 2 to [`MAX_FLIPS`] distinct ones.
    fn draw_flips(rng: &mut ChaCha8Rng, layout: &Layout) -> Self {
        let want = if rng.random_bool(0.5) { 1 } else { rng.random_range(2..=MAX_FLIPS) };
        let mut flips = BTreeSet::new();
        for _ in 0..want * 4 {
            if flips.len() == want {
                break;
            }
            flips.insert((draw_offset(rng, layout), rng.random_range(0..8u8)));
        }
        Self::BitFlips(flips.into_iter().collect())
    }

    /// Random bytes inside one metadata interval (anywhere if the file has no metadata).
    fn draw_overwrite(rng: &mut ChaCha8Rng, layout: &Layout) -> Self {
        let whole = [(0, layout.len)];
        let intervals = if layout.metadata.is_empty() { &whole[..] } else { &layout.metadata[..] };
        let offset = draw_in(rng, intervals).unwrap_or(0);
        let end = intervals.iter().find(|(s, t)| (*s..*t).contains(&offset)).map_or(layout.len, |iv| iv.1);
        let len = rng.random_range(1..=MAX_OVERWRITE).min(end - offset);
        Self::Overwrite { offset, bytes: (0..len).map(|_| rng.random()).collect() }
    }

    /// A link in a random group to itself or one of its ancestors.
    fn draw_link(rng: &mut ChaCha8Rng, layout: &Layout) -> Self {
        let root = "/".to_string();
        let group = if layout.groups.is_empty() { &root } else { &layout.groups[rng.random_range(0..layout.groups.len())] };
        let up = ancestors_or_self(group);
        let target = up[rng.random_range(0..up.len())].clone();
        let name = format!("loop{}", rng.random_range(0..100u32));
        let link = if group == "/" { format!("/{name}") } else { format!("{group}/{name}") };
        Self::CyclicLink { link, target }
    }

    /// Applies a byte mutation to `bytes` ([`FileMutation::CyclicLink`] changes nothing here).
    pub fn apply_bytes(&self, bytes: &mut Vec<u8>) {
        let len = bytes.len();
        let at = |o: u64| (o as usize).min(len);
        match self {
            Self::BitFlips(flips) => {
                for &(o, b) in flips {
                    if let Some(byte) = bytes.get_mut(o as usize) {
                        *byte ^= 1 << b;
                    }
                }
            }
            Self::Truncate(n) => bytes.truncate(at(*n)),
            Self::ZeroBlock { offset, len: n } => bytes[at(*offset)..at(offset + n)].fill(0),
            Self::Overwrite { offset, bytes: new } => {
                let end = at(offset + new.len() as u64);
                let start = at(*offset);
                bytes[start..end].copy_from_slice(&new[..end - start]);
            }
            Self::CyclicLink { .. } => {}
        }
    }

    /// Applies the mutation to the file at `path` in place (a copy of the intact file).
    pub fn apply_to_file(&self, path: &Path) -> anyhow::Result<()> {
        if let Self::CyclicLink { link, target } = self {
            return Ok(resilab_h5::add_hard_link(path, link, target)?);
        }
        let mut bytes = std::fs::read(path).with_context(|| format!("{}", path.display()))?;
        self.apply_bytes(&mut bytes);
        std::fs::write(path, bytes).with_context(|| format!("{}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng as _};

    /// Extents at the given `(start, end)` byte ranges, sorted as `Reader::extents` sorts them.
    fn extents(data: &[(u64, u64)]) -> Vec<resilab_h5::Extent> {
        let mut e: Vec<resilab_h5::Extent> = data
            .iter()
            .map(|&(s, t)| resilab_h5::Extent { path: format!("/d{s}"), dtype: resilab_h5::Dtype::F32, offset: s, size: t - s })
            .collect();
        e.sort_by_key(|x| x.offset);
        e
    }

    fn layout(len: u64, data: &[(u64, u64)]) -> Layout {
        let groups = groups_of(&["/model/layer1/0/conv1/weight".into(), "/train_state/step".into()]);
        Layout { len, metadata: metadata_intervals(len, &extents(data)), groups }
    }

    /// Indices where two equally long byte strings differ.
    fn changed(a: &[u8], b: &[u8]) -> Vec<usize> {
        (0..a.len()).filter(|&i| a[i] != b[i]).collect()
    }

    #[test]
    fn metadata_is_the_complement_of_the_data() {
        assert_eq!(metadata_intervals(100, &extents(&[(25, 35), (10, 30), (50, 58)])), [(0, 10), (35, 50), (58, 100)]);
        assert_eq!(metadata_intervals(40, &extents(&[(0, 10), (30, 60)])), [(10, 30)]);
        assert_eq!(metadata_intervals(10, &[]), [(0, 10)]);
    }

    #[test]
    fn groups_and_ancestors() {
        let g = groups_of(&["/a/b/c".into(), "/a/d".into(), "/e".into()]);
        assert_eq!(g, ["/", "/a", "/a/b"]);
        assert_eq!(ancestors_or_self("/a/b"), ["/", "/a", "/a/b"]);
        assert_eq!(ancestors_or_self("/"), ["/"]);
    }

    proptest! {
        #[test]
        fn bit_flips_change_exactly_their_bits(seed: u64, len in 1u64..3000, cut in 0u64..3000) {
            let data = [(cut.min(len), (cut + 700).min(len))];
            let l = layout(len, &data);
            let m = FileMutation::draw_flips(&mut ChaCha8Rng::seed_from_u64(seed), &l);
            let FileMutation::BitFlips(flips) = &m else { unreachable!() };
            prop_assert!(!flips.is_empty() && flips.len() <= MAX_FLIPS);
            let orig: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut out = orig.clone();
            m.apply_bytes(&mut out);
            prop_assert_eq!(out.len(), orig.len());
            for i in 0..orig.len() {
                let mask = flips.iter().filter(|(o, _)| *o as usize == i).fold(0u8, |m, (_, b)| m | 1 << b);
                prop_assert_eq!(out[i] ^ orig[i], mask, "byte {}", i);
            }
        }

        #[test]
        fn truncation_keeps_a_prefix(seed: u64, len in 1u64..3000) {
            let l = layout(len, &[]);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let n = rng.random_range(0..len);
            let orig: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut out = orig.clone();
            FileMutation::Truncate(n).apply_bytes(&mut out);
            prop_assert_eq!(&out[..], &orig[..n as usize]);
            prop_assert!(l.len > n);
        }

        #[test]
        fn drawn_mutations_stay_in_the_file_and_say_what_they_change(seed: u64, len in 1u64..3000, cut in 0u64..3000) {
            let data = [(cut.min(len), (cut + 500).min(len))];
            let l = layout(len, &data);
            let m = FileMutation::draw(&mut ChaCha8Rng::seed_from_u64(seed), &l);
            let orig: Vec<u8> = (0..len).map(|i| (i % 200) as u8 + 1).collect(); // no zero bytes
            let mut out = orig.clone();
            m.apply_bytes(&mut out);
            match &m {
                FileMutation::Truncate(n) => { prop_assert!(*n < len); prop_assert_eq!(&out[..], &orig[..*n as usize]); }
                FileMutation::ZeroBlock { offset, len: n } => {
                    prop_assert!(*n >= 1 && *n <= MAX_ZERO_BLOCK && offset + n <= len);
                    let want: Vec<usize> = (*offset as usize..(offset + n) as usize).collect();
                    prop_assert_eq!(changed(&orig, &out), want);
                    prop_assert!(out[*offset as usize..(offset + n) as usize].iter().all(|&b| b == 0));
                }
                FileMutation::Overwrite { offset, bytes } => {
                    let (s, e) = (*offset as usize, *offset as usize + bytes.len());
                    prop_assert!(!bytes.is_empty() && bytes.len() as u64 <= MAX_OVERWRITE);
                    prop_assert!(l.metadata.iter().any(|(a, b)| *a <= *offset && (e as u64) <= *b), "outside metadata");
                    prop_assert_eq!(&out[s..e], &bytes[..]);
                    prop_assert!(changed(&orig, &out).iter().all(|i| (s..e).contains(i)));
                }
                FileMutation::BitFlips(f) => prop_assert_eq!(changed(&orig, &out).len(), f.iter().map(|p| p.0).collect::<BTreeSet<_>>().len()),
                FileMutation::CyclicLink { link, target } => {
                    prop_assert_eq!(&out, &orig);
                    let parent = &link[..link.rfind('/').unwrap().max(1)];
                    prop_assert!(ancestors_or_self(parent).contains(target), "{} -> {}", link, target);
                }
            }
        }

        #[test]
        fn offsets_favour_metadata(seed: u64) {
            // Metadata is 10% of this file; with weight 0.85 most draws land there.
            let l = layout(1000, &[(100, 1000)]);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let hits = (0..400).filter(|_| draw_offset(&mut rng, &l) < 100).count();
            prop_assert!(hits > 280, "{} of 400 in metadata", hits);
        }
    }

    #[test]
    fn cyclic_link_on_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.h5");
        let w = resilab_h5::Writer::create(&p).unwrap();
        w.write_u64("/model/layer1/x", 5).unwrap();
        w.close().unwrap();
        let m = FileMutation::CyclicLink { link: "/model/layer1/loop".into(), target: "/model".into() };
        m.apply_to_file(&p).unwrap();
        let e = resilab_h5::Reader::open(&p).err().expect("the cycle is refused").to_string();
        assert!(e.contains("/model/layer1/loop") && e.contains("cycle"), "{e}");
    }
}

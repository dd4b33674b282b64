//! MNIST and Fashion-MNIST in IDX format (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
//! `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`), raw or with a `.gz` suffix.

use std::io::Read;
use std::path::{Path, PathBuf};

use resilab_limits::{RegularFile, checked_product};

use crate::{Dataset, Error, Result};

const IMAGES_MAGIC: u32 = 0x0000_0803;
const LABELS_MAGIC: u32 = 0x0000_0801;

fn find(dir: &Path, stem: &str) -> PathBuf {
    let raw = dir.join(stem);
    let gz = dir.join(format!("{stem}.gz"));
    if !raw.exists() && gz.exists() { gz } else { raw }
}

/// What names every IDX file in errors.
const KEY: &str = "data.path";

/// The shape and the data of one IDX file, raw or (when its name ends in `.gz`) gzip-compressed.
/// The file must be a regular file (never a FIFO or a device); its data must be exactly what its
/// header declares, and that must fit the memory budget, before the data is read.
fn read_idx(path: &Path, magic: u32, dims: usize) -> Result<(Vec<usize>, Vec<u8>)> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let mut file = RegularFile::open(KEY, path)?;
    let need = 4 + 4 * dims as u64;
    if path.extension().is_some_and(|e| e == "gz") {
        let compressed = file.read_all(u64::MAX, "a gzip-compressed IDX file")?;
        let mut gz = flate2::read::GzDecoder::new(&compressed[..]);
        let mut head = Vec::new();
        (&mut gz).take(need).read_to_end(&mut head).map_err(io)?;
        let (shape, body) = header(path, &head, magic, dims)?;
        let what = "the data its IDX header declares, decompressed";
        crate::check_memory(KEY, &path.display(), Some(body), what)?;
        let mut data = Vec::with_capacity(usize::try_from(body).unwrap_or(0));
        // One byte more than declared tells a longer stream without reading the rest of it.
        (&mut gz).take(body + 1).read_to_end(&mut data).map_err(io)?;
        if data.len() as u64 != body {
            let found = if data.len() as u64 > body { "more".to_string() } else { data.len().to_string() };
            return Err(promised(path, body, &shape, &found));
        }
        return Ok((shape, data));
    }
    let head = file.head(need)?;
    let (shape, body) = header(path, &head, magic, dims)?;
    if file.len() != need + body {
        return Err(promised(path, body, &shape, &file.len().saturating_sub(need).to_string()));
    }
    let mut data = file.read_all(need + body, "its IDX header")?;
    if data.len() as u64 != need + body {
        return Err(promised(path, body, &shape, &data.len().saturating_sub(need as usize).to_string()));
    }
    data.drain(..need as usize);
    Ok((shape, data))
}

fn promised(path: &Path, body: u64, shape: &[usize], found: &str) -> Error {
    Error::Format {
        path: path.to_path_buf(),
        message: format!("header promises {body} data bytes (shape {shape:?}) but the file has {found} (truncated?)"),
    }
}

/// The shape an IDX header declares and the data bytes that shape takes.
fn header(path: &Path, bytes: &[u8], magic: u32, dims: usize) -> Result<(Vec<usize>, u64)> {
    let bad = |message: String| Error::Format { path: path.to_path_buf(), message };
    let need = 4 + 4 * dims;
    if bytes.len() < need {
        return Err(bad(format!("{} bytes is too short for an IDX header", bytes.len())));
    }
    let word = |i: usize| u32::from_be_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
    if word(0) != magic {
        return Err(bad(format!("wrong IDX magic 0x{:08x} (expected 0x{magic:08x})", word(0))));
    }
    let words: Vec<u64> = (1..=dims).map(|i| u64::from(word(i))).collect();
    let body = checked_product(&words).ok_or_else(|| bad(format!("the header's shape {words:?} holds more than 2^64 bytes")))?;
    Ok((words.iter().map(|&w| w as usize).collect(), body))
}

/// Reads one images file and its labels file.
pub fn read_pair(images: &Path, labels: &Path) -> Result<Dataset> {
    let (ishape, img) = read_idx(images, IMAGES_MAGIC, 3)?;
    let (lshape, labels_vec) = read_idx(labels, LABELS_MAGIC, 1)?;
    if ishape[0] != lshape[0] {
        return Err(Error::Format {
            path: labels.to_path_buf(),
            message: format!("{} labels for {} images in {}", lshape[0], ishape[0], images.display()),
        });
    }
    if ishape[1] != ishape[2] {
        return Err(Error::Format {
            path: images.to_path_buf(),
            message: format!("images are {}x{}; only square images are supported", ishape[1], ishape[2]),
        });
    }
    if let Some((i, l)) = labels_vec.iter().enumerate().find(|(_, l)| **l >= 10) {
        return Err(Error::Format { path: labels.to_path_buf(), message: format!("label {l} at index {i} (expected 0-9)") });
    }
    Ok(Dataset { images: img, labels: labels_vec, channels: 1, size: ishape[1], classes: 10 })
}

/// Reads the training and test sets from `dir`.
pub fn load(dir: &Path) -> Result<(Dataset, Dataset)> {
    let train = read_pair(&find(dir, "train-images-idx3-ubyte"), &find(dir, "train-labels-idx1-ubyte"))?;
    let test = read_pair(&find(dir, "t10k-images-idx3-ubyte"), &find(dir, "t10k-labels-idx1-ubyte"))?;
    Ok((train, test))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn idx(magic: u32, shape: &[u32], body: &[u8]) -> Vec<u8> {
        let mut v = magic.to_be_bytes().to_vec();
        for d in shape {
            v.extend(d.to_be_bytes());
        }
        v.extend(body);
        v
    }

    #[test]
    fn reads_raw_and_gz() {
        let dir = tempfile::tempdir().unwrap();
        let images = idx(IMAGES_MAGIC, &[2, 28, 28], &[9u8; 2 * 784]);
        let labels = idx(LABELS_MAGIC, &[2], &[4, 2]);
        std::fs::write(dir.path().join("train-images-idx3-ubyte"), &images).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&labels).unwrap();
        std::fs::write(dir.path().join("train-labels-idx1-ubyte.gz"), gz.finish().unwrap()).unwrap();
        let d = read_pair(&find(dir.path(), "train-images-idx3-ubyte"), &find(dir.path(), "train-labels-idx1-ubyte")).unwrap();
        assert_eq!(d.labels, vec![4, 2]);
        assert_eq!((d.channels, d.size, d.images.len()), (1, 28, 2 * 784));
    }

    #[test]
    fn a_fifo_a_device_and_data_beyond_the_header_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let labels = dir.path().join("y");
        std::fs::write(&labels, idx(LABELS_MAGIC, &[1], &[0])).unwrap();
        let fifo = dir.path().join("train-images-idx3-ubyte");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let err = read_pair(&fifo, &labels).unwrap_err().to_string();
        assert!(err.contains("train-images-idx3-ubyte is a FIFO"), "{err}");
        let gz = dir.path().join("x.gz");
        std::os::unix::fs::symlink("/dev/zero", &gz).unwrap();
        let err = read_pair(&gz, &labels).unwrap_err().to_string();
        assert!(err.contains("x.gz is a character device"), "{err}");
        // A stream that goes on past what its header declares is read one byte past it, no more.
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&idx(IMAGES_MAGIC, &[1, 28, 28], &[0u8; 784 + (64 << 20)])).unwrap();
        let long = dir.path().join("long.gz");
        std::fs::write(&long, enc.finish().unwrap()).unwrap();
        let err = read_pair(&long, &labels).unwrap_err().to_string();
        assert!(err.contains("header promises 784 data bytes (shape [1, 28, 28]) but the file has more"), "{err}");
        // A header whose shape is beyond memory is refused before the data is read.
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&idx(IMAGES_MAGIC, &[1 << 20, 1 << 20, 28], &[])).unwrap();
        std::fs::write(&long, enc.finish().unwrap()).unwrap();
        let err = read_pair(&long, &labels).unwrap_err().to_string();
        assert!(err.contains("more than the budget"), "{err}");
    }

    #[test]
    fn wrong_magic_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, idx(0x0000_0802, &[1, 28, 28], &[0u8; 784])).unwrap();
        std::fs::write(dir.path().join("y"), idx(LABELS_MAGIC, &[1], &[0])).unwrap();
        let err = read_pair(&p, &dir.path().join("y")).unwrap_err().to_string();
        assert!(err.contains("wrong IDX magic 0x00000802"), "{err}");
    }

    #[test]
    fn truncated_body_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, idx(IMAGES_MAGIC, &[2, 28, 28], &[0u8; 784])).unwrap();
        std::fs::write(dir.path().join("y"), idx(LABELS_MAGIC, &[2], &[0, 1])).unwrap();
        let err = read_pair(&p, &dir.path().join("y")).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
    }
}

//! MNIST and Fashion-MNIST in IDX format (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
//! `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`), raw or with a `.gz` suffix.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::{Dataset, Error, Result};

const IMAGES_MAGIC: u32 = 0x0000_0803;
const LABELS_MAGIC: u32 = 0x0000_0801;

fn find(dir: &Path, stem: &str) -> PathBuf {
    let raw = dir.join(stem);
    let gz = dir.join(format!("{stem}.gz"));
    if !raw.exists() && gz.exists() { gz } else { raw }
}

/// Reads a file, decompressing it if its name ends in `.gz`.
fn read_maybe_gz(path: &Path) -> Result<Vec<u8>> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let raw = std::fs::read(path).map_err(io)?;
    if path.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..]).read_to_end(&mut out).map_err(io)?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

fn header(path: &Path, bytes: &[u8], magic: u32, dims: usize) -> Result<Vec<usize>> {
    let bad = |message: String| Error::Format { path: path.to_path_buf(), message };
    let need = 4 + 4 * dims;
    if bytes.len() < need {
        return Err(bad(format!("{} bytes is too short for an IDX header", bytes.len())));
    }
    let word = |i: usize| u32::from_be_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
    if word(0) != magic {
        return Err(bad(format!("wrong IDX magic 0x{:08x} (expected 0x{magic:08x})", word(0))));
    }
    let shape: Vec<usize> = (1..=dims).map(|i| word(i) as usize).collect();
    let body: usize = shape.iter().product();
    if bytes.len() != need + body {
        return Err(bad(format!(
            "header promises {body} data bytes (shape {shape:?}) but the file has {} (truncated?)",
            bytes.len() - need
        )));
    }
    Ok(shape)
}

/// Reads one images file and its labels file.
pub fn read_pair(images: &Path, labels: &Path) -> Result<Dataset> {
    let img = read_maybe_gz(images)?;
    let ishape = header(images, &img, IMAGES_MAGIC, 3)?;
    let lab = read_maybe_gz(labels)?;
    let lshape = header(labels, &lab, LABELS_MAGIC, 1)?;
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
    let labels_vec = lab[8..].to_vec();
    if let Some((i, l)) = labels_vec.iter().enumerate().find(|(_, l)| **l >= 10) {
        return Err(Error::Format { path: labels.to_path_buf(), message: format!("label {l} at index {i} (expected 0-9)") });
    }
    Ok(Dataset { images: img[16..].to_vec(), labels: labels_vec, channels: 1, size: ishape[1], classes: 10 })
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

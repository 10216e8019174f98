#!/usr/bin/python3
"""WMT-shaped source archives for dtrain's datagen tests, written with
Python's tarfile (not dtrain's code): the archive names and internal paths
of t2t's translate_ende.py, holding made-up parallel text.

  wmt_archives.py DIR SEED
      writes into DIR:
        training-parallel-nc-v13.tgz    training-parallel-nc-v13/news-commentary-v13.de-en.{en,de}
                                        (600 lines, one pair with an empty side)
        training-parallel-commoncrawl.tgz  commoncrawl.de-en.{en,de} (400 lines), beside
                                        commoncrawl.fr-en.{en,fr} (not read), members under "./"
        training-parallel-europarl-v7.tgz  training/europarl-v7.de-en.{en,de} (300 lines)
        dev.tgz                         dev/newstest2013.{en,de} (100 lines), dev/newstest2012.en
      "English" lines are 3 to 12 words of a 60-word list; the "German" line
      is each word's fixed stand-in, in order. Prints the number of pairs
      with both sides non-empty: "train N dev M".
"""
import io
import os
import random
import sys
import tarfile

WORDS = ("the house is small and old but we like it very much because our friends live near the river "
         "where children play every day with a red ball while their parents read books about history "
         "music art science travel food water light night morning").split()


def german(word):
    return word[::-1] + "en" if len(word) > 3 else word.upper().lower() + "e"


def pairs(rng, n, empty_at=None):
    en, de = [], []
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
        e, d = " ".join(words), " ".join(german(w) for w in words)
        if i == empty_at:
            d = "   "
        en.append(e)
        de.append(d)
    return en, de


def add(tar, name, lines):
    data = ("\n".join(lines) + "\n").encode()
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, lines in members:
            add(tar, name, lines)


def main(d, seed):
    rng = random.Random(seed)
    os.makedirs(d, exist_ok=True)
    nc = pairs(rng, 600, empty_at=7)
    cc = pairs(rng, 400)
    ep = pairs(rng, 300)
    dev = pairs(rng, 100)
    write(os.path.join(d, "training-parallel-nc-v13.tgz"),
          [("training-parallel-nc-v13/news-commentary-v13.de-en.en", nc[0]),
           ("training-parallel-nc-v13/news-commentary-v13.de-en.de", nc[1])])
    write(os.path.join(d, "training-parallel-commoncrawl.tgz"),
          [("./commoncrawl.fr-en.en", cc[0]), ("./commoncrawl.fr-en.fr", cc[1]),
           ("./commoncrawl.de-en.en", cc[0]), ("./commoncrawl.de-en.de", cc[1])])
    write(os.path.join(d, "training-parallel-europarl-v7.tgz"),
          [("training/europarl-v7.de-en.en", ep[0]), ("training/europarl-v7.de-en.de", ep[1])])
    write(os.path.join(d, "dev.tgz"),
          [("dev/newstest2012.en", dev[0]), ("dev/newstest2013.en", dev[0]), ("dev/newstest2013.de", dev[1])])
    print("train", 600 - 1 + 400 + 300, "dev", 100)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], int(sys.argv[2]))

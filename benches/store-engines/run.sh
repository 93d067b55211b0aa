#!/bin/bash
# Reproduces every figure in REPORT.md. Build once: cargo build --release (target/ is inside this dir).
# Each step deletes /tmp/store-engines-data first. Appends to results*.txt.
set -u
B=./target/release/store-engines D=/tmp/store-engines-data
# 1. group-commit append
for spec in "1 2000" "64 200000" "1024 200000"; do for e in redb fjall sqlite; do
  rm -rf $D; timeout 60 $B $e append $D/$e $spec; done; done
# 2. churn (queue: batch 64, delete i-1000 in the same batch)
for e in redb fjall sqlite; do rm -rf $D; timeout 60 $B $e churn $D/$e 200000 1000; done
# 3+4. load 1M (batches of 1024), recover twice in fresh processes, delete all + reopen + explicit compaction
for e in redb fjall sqlite; do rm -rf $D
  timeout 120 $B $e load $D/$e 1000000
  timeout 60 $B $e recover $D/$e; timeout 60 $B $e recover $D/$e
  timeout 120 $B $e deleteall $D/$e 1000000; done
rm -rf $D; REDB_CHECK=1 $B redb load $D/redb 1000000; REDB_CHECK=1 $B redb recover $D/redb
# robustness: second process / second handle
for e in redb fjall sqlite; do rm -rf $D; $B $e load $D/$e 100000 >/dev/null
  ( $B $e hold $D/$e 3 & ); sleep 1; $B $e open $D/$e; sleep 3; done
# unwritable dir (we are root, so run as nobody)
NB="setpriv --reuid=65534 --regid=65534 --clear-groups"
for e in redb fjall sqlite; do rm -rf $D; mkdir -p $D/ro/$e; chmod -R 755 $D; (cd /tmp; $NB $PWD/$B $e write1 $D/ro/$e)
  rm -rf $D; $B $e load $D/$e 1000 >/dev/null; (cd /tmp; $NB $OLDPWD/$B $e write1 $D/$e); done
# corruption: 4 KiB of random bytes in the middle of the largest file (fjall: table file and journal separately)
corrupt(){ f=$1; sz=$(stat -c %s $f); head -c 4096 /dev/urandom | dd of=$f bs=4096 seek=$((sz/2/4096)) conv=notrunc status=none; }
for e in redb sqlite; do rm -rf $D; $B $e load $D/$e 300000 >/dev/null
  corrupt $(find $D -type f -printf '%s %p\n' | sort -rn | head -1 | cut -d' ' -f2); $B $e open $D/$e; echo rc=$?
  [ $e = redb ] && REDB_CHECK=1 $B $e open $D/$e; done
for which in tables jnl; do rm -rf $D; $B fjall load $D/fjall 300000 >/dev/null
  corrupt $(find $D -type f -path "*$which*" -printf '%s %p\n' | sort -rn | head -1 | cut -d' ' -f2); $B fjall open $D/fjall; echo rc=$?; done
rm -rf $D

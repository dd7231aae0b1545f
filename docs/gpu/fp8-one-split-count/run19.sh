#!/usr/bin/env bash
# Sweep part 2 of 3: B 16, 64, 128 at H 16, 64, 128, except 128/128.
source "$(dirname "$0")/common.sh"
part large-b16-b64 400 370 --batch 16,64 --heads 16,64,128
part large-b128 190 170 --batch 128 --heads 16,64

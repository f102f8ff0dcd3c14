#!/usr/bin/env bash
# Checks that a built libbexpress.so exports the public API and nothing of the layers under src/:
# every defined dynamic symbol must be a name declared with BX_EXPORT (or an enum) under
# include/bx/, or a libstdc++ template instantiated for such a type.
#
#   tools/check-exports.sh build/lib/libbexpress.so [include-dir]
set -euo pipefail
lib=$1
include=${2:-$(dirname "$0")/../include}

# Names the public headers declare: exported classes and structs, exported functions, enums.
public=$(grep -rhoE '(class|struct)( \[\[nodiscard\]\])? BX_EXPORT [A-Za-z_]+|^BX_EXPORT [^(]*[ *&]~?[A-Za-z_]+\(|^enum class [A-Za-z_]+' \
  "$include/bx" | sed -E 's/\($//; s/.*[ *&]//' | sort -u)
[[ -n $public ]] || { echo "check-exports: no BX_EXPORT declarations under $include/bx" >&2; exit 1; }

symbols=$(nm -D --defined-only -C "$lib" | cut -c20-)
public_entity='^bx::(rpc::|ps::|bemalloc::|metrics::|observe::)?([A-Za-z_]+)'
# A class nested in a public one (Client::Core) is internal unless the headers define it (a
# forward declaration for a pimpl does not count).
nested_entity='^bx::(rpc::|ps::|bemalloc::|metrics::|observe::)?[A-Z][A-Za-z_]*::([A-Z][A-Za-z_]*)::'
std_instance='(^|[ (<])(std|__gnu_cxx)::'
bad=0
checked=0
while IFS= read -r symbol; do
  checked=$((checked + 1))
  # The entity the symbol belongs to: drop "vtable for " and the like, then take the
  # outermost bx:: name (bx::Name or bx::namespace::Name).
  entity=$(sed -E 's/^(typeinfo name for|typeinfo for|vtable for|VTT for|construction vtable for|guard variable for|(non-)?virtual thunk to) //' <<<"$symbol")
  if [[ $entity =~ $public_entity ]]; then
    name=${BASH_REMATCH[2]}
    if ! grep -qx -- "$name" <<<"$public"; then
      echo "not public API: $symbol" >&2
      bad=$((bad + 1))
    elif [[ $entity =~ $nested_entity ]] && ! grep -qE "(class|struct) (BX_EXPORT )?${BASH_REMATCH[2]}\\b[^;]*\\{" -r "$include/bx"; then
      echo "internal class nested in a public one: $symbol" >&2
      bad=$((bad + 1))
    fi
  elif [[ $entity =~ ^bx:: ]]; then
    echo "internal namespace: $symbol" >&2
    bad=$((bad + 1))
  elif [[ $entity =~ $std_instance ]]; then
    : # a libstdc++ template instantiation (weak, default visibility by libstdc++'s own pragma)
  else
    echo "not bexpress API: $symbol" >&2
    bad=$((bad + 1))
  fi
done <<<"$symbols"

# The API itself must be there (a build without visibility control would pass the checks above
# vacuously only if it exported nothing).
for required in 'bx::Init(' 'bx::CreateTransport(' 'bx::rpc::Client::Create(' 'bx::bemalloc::Allocate('; do
  grep -qF -- "$required" <<<"$symbols" || {
    echo "missing from the exports: $required" >&2
    bad=$((bad + 1))
  }
done
if ((bad > 0)); then
  echo "check-exports: $bad of $checked exported symbols of $lib are not bexpress's public API" >&2
  exit 1
fi
echo "check-exports: $checked exported symbols of $lib, all public API"

#!/bin/sh
# POST NODE RETURN: record what DAGMan passed; exit 3 is a success, anything else fails
echo "$2" > "post-$1.return"
[ "$2" = 3 ]

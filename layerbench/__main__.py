from layerbench.cli import main

raise SystemExit(main())

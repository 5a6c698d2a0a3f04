from gpuwizard.cli import main

raise SystemExit(main())
